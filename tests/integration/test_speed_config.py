"""The worker pool: a configuration that cannot work stops it once, saying why, instead of restarting forever;
its workers run in sessions of their own (a CPU share each) and still die with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient

from adapters import kafka as kafka_io
from speed.cli import CONFIG_EXIT
from trendcore.settings import Settings

pytestmark = pytest.mark.integration


def _pool_env(stack: Settings, uid: str, partitions: int) -> dict[str, str]:
    """A pool's environment on fresh topics of its own (created with `partitions`), deleted by the caller."""
    kafka = stack.kafka.model_copy(update={"posts_topic": f"cfg-posts-{uid}", "engagements_topic": f"cfg-eng-{uid}",
                                           "dead_letter_topic": f"cfg-dlq-{uid}"})
    kafka_io.ensure_topics(kafka, partitions=partitions)
    return {**os.environ, "TRENDS_KAFKA__BOOTSTRAP": kafka.bootstrap, "TRENDS_KAFKA__POSTS_TOPIC": kafka.posts_topic,
            "TRENDS_KAFKA__ENGAGEMENTS_TOPIC": kafka.engagements_topic,
            "TRENDS_KAFKA__DEAD_LETTER_TOPIC": kafka.dead_letter_topic, "TRENDS_KAFKA__PARTITIONS": "2",
            "TRENDS_REDIS__URL": stack.redis.url, "TRENDS_SPEED__GROUP": f"cfg-{uid}",
            "TRENDS_SPEED__METRICS_PORT": str(stack.speed.metrics_port + 94)}  # and + 95: free ports


def _delete_topics(env: dict[str, str]) -> None:
    admin = KafkaAdminClient(bootstrap_servers=env["TRENDS_KAFKA__BOOTSTRAP"].split(","))
    admin.delete_topics([env["TRENDS_KAFKA__POSTS_TOPIC"], env["TRENDS_KAFKA__ENGAGEMENTS_TOPIC"],
                         env["TRENDS_KAFKA__DEAD_LETTER_TOPIC"]])
    admin.close()


def _children(pid: int) -> list[int]:
    """Live direct children of a process, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_each_worker_leads_a_session_of_its_own_and_dies_with_a_killed_pool(stack: Settings, tmp_path: Path):
    env = _pool_env(stack, uuid.uuid4().hex[:8], partitions=2)
    with open(tmp_path / "pool.log", "wb") as out:
        pool = subprocess.Popen([sys.executable, "-m", "speed", "run", "--workers", "2"], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 30
        while len(workers) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
            workers = _children(pool.pid)
        assert len(workers) == 2, (tmp_path / "pool.log").read_text(errors="replace")
        assert [os.getsid(w) for w in workers] == workers  # each leads its own session
        assert os.getsid(pool.pid) == pool.pid
        os.kill(pool.pid, signal.SIGKILL)
        pool.wait()
        deadline = time.monotonic() + 60
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [w for w in workers if _alive(w)]
        assert left == [], f"workers {left} outlived their killed pool"
    finally:
        for pid in [pool.pid, *workers]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _delete_topics(env)


def test_a_pool_on_topics_with_more_partitions_than_configured_stops_with_the_setting_named(stack: Settings,
                                                                                            tmp_path: Path):
    env = _pool_env(stack, uuid.uuid4().hex[:8], partitions=3)
    log = tmp_path / "pool.log"
    with open(log, "wb") as out:
        pool = subprocess.Popen([sys.executable, "-m", "speed", "run", "--workers", "2"], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        code = pool.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(pool.pid, signal.SIGKILL)
        code = None
    finally:
        _delete_topics(env)
    said = log.read_text(errors="replace")
    assert code == CONFIG_EXIT, said
    assert "have 3 partitions but TRENDS_KAFKA__PARTITIONS is 2" in said and "stopping the pool" in said, said
    assert "restarting" not in said, said
