"""Redis failover under load (issue #26 item 6): the speed workers write through Sentinel, the master is
SIGKILLed mid-stream, while its replica is SIGSTOPped (so the master acknowledges checkpoints it never
replicates), and Sentinel promotes the replica. Checkpoints the old master acknowledged but never
replicated are gone with it, offsets included, so the workers' next checkpoints of those partitions are
refused as stale and the partitions replayed from Kafka after the checkpoints that survived: every merged
sketch cell must still equal the reference. The materializer and the API follow the promotion through the
same Sentinel settings.

The set is a master, a replica and a Sentinel (trends/stack/redis_sentinel.py) on ports base+56..58.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_py
from fastapi.testclient import TestClient

from adapters import redis as redis_io
from tests.integration.test_speed import (
    Lane,
    _lane,
    _produce_in_background,
    assert_cells_match,
    make_stream,
    wait_until,
)
from trendcore.keys import KeySpace
from trendcore.settings import Settings
from trends.stack import procs, redis_sentinel

pytestmark = pytest.mark.integration

HOST = "127.0.0.1"
BASE = int(os.environ.get("PYTEST_TRENDS_BASE_PORT", "29000"))
PORTS = (BASE + 56, BASE + 57, BASE + 58)
UNREPLICATED_BYTES = 64 * 1024 * 1024  # loopback TCP buffers here grow to 32 MB (tcp_rmem)
FILLER = "failover-test:filler:"
"""Keys the test writes to the master to fill the stopped replica's link, so later checkpoints stay unsent."""
FILLER_CHUNK = 16 * 1024 * 1024
ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.fixture
def sentinel_lane(stack: Settings, tmp_path: Path) -> Iterator[tuple[Lane, redis_sentinel.SentinelSet]]:
    """A speed lane (own topics and group) whose Redis is the master the Sentinel names."""
    found = redis_sentinel.start(tmp_path / "sentinel", HOST, PORTS, down_after_ms=1000, failover_timeout_ms=5000)
    gen = _lane(stack, tmp_path)
    lane = next(gen)
    try:
        lane.settings = lane.settings.model_copy(update={"redis": lane.settings.redis.model_copy(update={
            "url": f"redis://{found.name}/0", "mode": "sentinel", "sentinels": f"{HOST}:{found.sentinel.port}",
            "master_name": found.name})})
        yield lane, found
    finally:
        gen.close()
        redis_sentinel.stop(found)


def _sentinel_env(lane: Lane) -> dict[str, str]:
    r = lane.settings.redis
    return {"TRENDS_REDIS__URL": r.url, "TRENDS_REDIS__MODE": r.mode, "TRENDS_REDIS__SENTINELS": r.sentinels,
            "TRENDS_REDIS__MASTER_NAME": r.master_name}


def _offset_names(lane: Lane) -> list[str]:
    """The checkpointed next offset keys of every input partition."""
    space = KeySpace.of(lane.settings)
    return [space.part_offset(p, t) for t, p in lane.topic_partitions()]


def _applied(lane: Lane) -> int:
    """Records checkpointed so far over every input partition (0 while Redis does not answer)."""
    names = _offset_names(lane)
    try:
        return sum(int(v) for v in lane.redis.mget(names) if v is not None)
    except Exception:  # noqa: BLE001 - during the failover any Redis error means "not known now"
        return 0


def _unreplicated_bytes(master: procs.Service) -> int:
    """How far the master's replication stream is ahead of what its replica acknowledged."""
    client = redis_py.Redis(host=master.host, port=master.port, socket_timeout=2)
    try:
        info = client.info("replication")
    finally:
        client.close()
    replica = info.get("slave0") or {}
    return int(info["master_repl_offset"]) - int(replica.get("offset", info["master_repl_offset"]))


def _fill_replication_link(master: procs.Service, nbytes: int) -> None:
    """Write `nbytes` of filler to the master: with its replica stopped they fill the kernel's socket buffers
    of the replication link, so every checkpoint acknowledged after them waits in the master's own output
    buffer and dies with it. The workers' own writes alone fill it too slowly since sketches are appended as
    chunks (a few hundred kB a checkpoint), and the stream may end before."""
    client = redis_py.Redis(host=master.host, port=master.port, socket_timeout=30)
    try:
        for n in range(-(-nbytes // FILLER_CHUNK)):
            client.set(f"{FILLER}{n}", b"x" * FILLER_CHUNK)
    finally:
        client.close()


def _offsets_on(svc: procs.Service, lane: Lane) -> int:
    """Records checkpointed according to one server's own copy of the offsets (0 when it does not answer)."""
    names = _offset_names(lane)
    client = redis_py.Redis(host=svc.host, port=svc.port, socket_timeout=2)
    try:
        return sum(int(v) for v in client.mget(names) if v is not None)
    except redis_py.RedisError:
        return 0
    finally:
        client.close()


def test_a_master_killed_mid_stream_is_replaced_and_every_cell_equals_the_reference(sentinel_lane):
    lane, s = sentinel_lane
    env = _sentinel_env(lane)
    stream = make_stream(100, 1000, seed=61, engagements_per_post=0.2, malformed_share=0.002, duplicate_share=0.005)
    lane.start_worker(0, **env)
    lane.start_worker(1, **env)
    producer = _produce_in_background(lane, stream, 100_000, rate=5000)
    wait_until(lambda: _applied(lane) >= 15_000, 120, "a quarter of the stream applied", lane)
    # the replica stops taking the master's writes; the master acknowledges checkpoints it never replicates
    replica_pid = procs.read_pid(s.replica)
    os.kill(replica_pid, signal.SIGSTOP)
    try:
        # more than the kernel's socket buffers can hold for the stopped replica (they reach it on SIGCONT)
        _fill_replication_link(s.master, UNREPLICATED_BYTES + FILLER_CHUNK)
        assert _unreplicated_bytes(s.master) > UNREPLICATED_BYTES
        filled = _offsets_on(s.master, lane)
        wait_until(lambda: _offsets_on(s.master, lane) > filled, 60, "checkpoints acknowledged unreplicated")
        acknowledged = _offsets_on(s.master, lane)
        os.kill(procs.read_pid(s.master), signal.SIGKILL)
    finally:
        os.kill(replica_pid, signal.SIGCONT)
    survived = _offsets_on(s.replica, lane)
    assert survived < acknowledged, f"the replica holds every checkpoint ({survived} of {acknowledged} records)"
    wait_until(lambda: redis_sentinel.master_address(s) == (HOST, s.replica.port), 60, "the replica's promotion")
    promoted = redis_py.Redis(host=HOST, port=s.replica.port, socket_timeout=5)
    promoted.delete(*promoted.keys(f"{FILLER}*"), f"{FILLER}none")  # what of the filler reached the replica
    promoted.close()
    producer.join(timeout=120)
    assert not producer.is_alive(), "the producer did not finish"
    lane.wait_applied(240)
    compared = assert_cells_match(lane, stream)
    assert compared >= 8
    assert all(proc.poll() is None for proc in lane.procs.values()), lane.log_tails()
    # the promoted replica lacked `acknowledged - survived` records' increments: equal cells mean they were replayed
    print(f"failover: master acknowledged {acknowledged} records, the replica kept {survived}; {compared} sketches "
          "equal the reference")

    materialized = subprocess.run([sys.executable, "-m", "speed", "materialize", "--once"], cwd=ROOT,
                                  env=lane.env(**env), capture_output=True, text=True, timeout=120)
    assert materialized.returncode == 0, materialized.stdout + materialized.stderr
    client = redis_io.client(lane.settings.redis)
    assert client.get(KeySpace.of(lane.settings).trending("all", "1h", "volume")) is not None

    from serving.app import create_app

    with TestClient(create_app(lane.settings)) as api:
        answer = api.get("/trending", params={"region": "all", "window": "1h"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["entries"], "the API read no trending entries from the promoted master"

