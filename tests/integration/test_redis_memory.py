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
