"""Redis memory cannot corrupt counts silently: the stack bounds Redis with `maxmemory` and `noeviction`, and
the speed worker, the materializer and the batch publish refuse a Redis that may evict keys (issue #26 item 1)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from adapters import redis as redis_io
from trendcore.errors import EvictingRedis

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent.parent


def _size(value: str) -> int:
    """redis-server's size units as bytes."""
    units = {"kb": 1024, "mb": 1024**2, "gb": 1024**3, "b": 1}
    for unit, factor in units.items():
        if value.endswith(unit):
            return int(value[: -len(unit)]) * factor
    return int(value)


def test_the_stack_starts_redis_bounded_and_without_eviction(stack):
    client = redis_io.client(stack.redis)
    config = client.config_get("maxmemory*")
    assert int(config["maxmemory"]) == _size(stack.stack.redis_maxmemory)
    assert config["maxmemory-policy"] == "noeviction"
    assert redis_io.eviction_policies(client) == {"noeviction"}


@pytest.fixture
def evicting(stack):
    """The session's Redis under `allkeys-lru` for one test, `noeviction` again afterwards."""
    client = redis_io.client(stack.redis)
    client.config_set("maxmemory-policy", "allkeys-lru")
    try:
        yield stack
    finally:
        client.config_set("maxmemory-policy", "noeviction")


@pytest.mark.parametrize("command", [["run"], ["materialize", "--once"]])
def test_speed_processes_refuse_an_evicting_redis_and_name_the_policy(evicting, command):
    env = {**os.environ, "TRENDS_REDIS__URL": evicting.redis.url, "TRENDS_KAFKA__BOOTSTRAP": evicting.kafka.bootstrap}
    done = subprocess.run([sys.executable, "-m", "speed", *command], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    output = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 1, output
    assert "refuses maxmemory-policy allkeys-lru" in output
    assert "Traceback" not in output


def test_the_publish_refuses_an_evicting_redis_before_staging(evicting, spark):
    from batch.publish import stage_frame

    df = spark.createDataFrame([("exact:US:h:1", "a", 1.0)], "key string, field string, value double")
    with pytest.raises(EvictingRedis, match="the batch publish refuses maxmemory-policy allkeys-lru"):
        stage_frame(df, evicting, "refused-run", ttl_s=60)
    assert not list(redis_io.client(evicting.redis).scan_iter(match="*refused-run*"))


def _oom_refusals(client) -> int:
    """Commands Redis refused for want of memory since it started (INFO errorstats)."""
    return int(client.info("errorstats").get("errorstat_OOM", {}).get("count", 0))


def test_a_full_redis_refuses_whole_steps_and_nothing_is_lost_once_raised(stack, tmp_path):
    """Under `noeviction` a full Redis refuses a checkpoint's first write (speed/checkpoint.lua reads before it
    writes), so a checkpoint is applied whole or not at all (a script that has written may finish over the
    limit). The worker reloads its partitions from Redis and retries; once the limit is raised every record is
    applied once: equal merged cells prove no checkpoint was applied in part or twice."""
    from tests.integration.test_speed import _lane, assert_cells_match, make_stream, wait_until

    gen = _lane(stack, tmp_path)
    lane = next(gen)
    admin = redis_io.client(stack.redis)
    limit = admin.config_get("maxmemory")["maxmemory"]
    try:
        stream = make_stream(30, 1000, seed=71, engagements_per_post=0.2, malformed_share=0.002)
        records = list(stream.records(30_000))
        lane.start_worker(0)
        lane.send(records[:3_000])
        lane.wait_applied(120)
        refusals = _oom_refusals(admin)
        admin.config_set("maxmemory", int(admin.info("memory")["used_memory"]) + 2 * 1024 * 1024)
        lane.send(records[3_000:])
        wait_until(lambda: _oom_refusals(admin) > refusals + 3, 120, "Redis refusing writes", lane)
        assert not lane.all_applied(), "everything fit: the test did not fill Redis"
        admin.config_set("maxmemory", limit)
        lane.wait_applied(180)
        assert_cells_match(lane, stream)
        assert lane.procs[0].poll() is None, lane.log_tails()
    finally:
        admin.config_set("maxmemory", limit)
        gen.close()
