"""The local stack's idempotence and plain-words refusals, and the generator feeding real Kafka."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from adapters import kafka as kafka_io
from trendcore.errors import StackError
from trendcore.settings import Settings
from trends.gen.model import GenConfig, Stream
from trends.gen.run import produce
from trends.stack import manager, procs

pytestmark = pytest.mark.integration


def _side_settings(tmp_path, settings: Settings, port: int) -> Settings:
    """A second Redis on `port` in its own home, without the session's TLS listener (its port is taken)."""
    redis = settings.redis.model_copy(update={"url": f"redis://127.0.0.1:{port}/0"})
    stack = settings.stack.model_copy(update={"home": tmp_path, "redis_tls_port": None})
    return settings.model_copy(update={"redis": redis, "stack": stack})


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_up_twice_reuses_running_services(stack):
    lines: list[str] = []
    manager.up(stack, names=["redis", "kafka"], log=lines.append)
    assert any("redis: already running" in line for line in lines)
    assert any("kafka: already running" in line for line in lines)
    assert {row["name"]: row["state"] for row in manager.status(stack)}["kafka"] == "running"


def test_port_held_by_someone_else_is_reported(tmp_path, settings):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        side = _side_settings(tmp_path, settings, squatter.getsockname()[1])
        with pytest.raises(StackError, match="held by a process this stack did not start") as refused:
            manager.up(side, names=["redis"], log=lambda _m: None)
    assert "TRENDS_STACK__INFRA=external" in str(refused.value)  # the way to use someone else's Redis


def test_an_unknown_component_is_refused_naming_the_real_ones(tmp_path, settings):
    side = _side_settings(tmp_path, settings, _free_port())
    with pytest.raises(StackError, match=r"unknown component speed-worker; the components are: redis, kafka, "
                                         r"speed-workers, .*api"):
        manager.up(side, names=["speed-worker"], log=lambda _m: None)
    assert not (tmp_path / "run").exists()


def test_stale_pid_file_is_detected_and_replaced(tmp_path, settings):
    side = _side_settings(tmp_path, settings, _free_port())
    svc = manager.components(side)["redis"].service(side)
    svc.run_dir.mkdir(parents=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    svc.pid_file.write_text(f"{dead.pid}\n")
    assert procs.state(svc) == "stale"
    lines: list[str] = []
    manager.up(side, names=["redis"], log=lines.append)
    try:
        assert any("stale PID file" in line for line in lines)
        assert procs.state(svc) == "running"
    finally:
        procs.stop(svc)
    assert procs.state(svc) == "stopped"


def test_generated_stream_lands_in_kafka(stack):
    before = {t: sum(kafka_io.end_offsets(stack.kafka, t).values()) for t in ("posts", "engagements")}
    stream = Stream(GenConfig(seed=11, start_ms=1_795_982_400_000, wall_now_ms=1_795_982_400_000, vocabulary=10_000))
    result = produce(stream, stack, count=2000)
    after = {t: sum(kafka_io.end_offsets(stack.kafka, t).values()) for t in ("posts", "engagements")}
    posts = after["posts"] - before["posts"]
    engagements = after["engagements"] - before["engagements"]
    truth = stream.truth
    assert result.posts == 2000
    assert posts == truth.posts + truth.duplicates + len(truth.malformed)
    assert engagements == truth.engagement_count
    assert posts + engagements == result.records


def test_cli_gen_and_tail_show_the_records(stack, tmp_path):
    env = {
        **os.environ,
        "TRENDS_KAFKA__BOOTSTRAP": stack.kafka.bootstrap,
        "TRENDS_REDIS__URL": stack.redis.url,
    }
    trends = [sys.executable, "-m", "trends"]
    gen = subprocess.run(
        [*trends, "gen", "--count", "300", "--seed", "5", "--truth", str(tmp_path / "truth")],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert gen.returncode == 0, gen.stderr
    assert "sent 300 posts" in gen.stderr
    summary = json.loads((tmp_path / "truth" / "summary.json").read_text())
    assert summary["posts"] == 300
    tail = subprocess.run([*trends, "tail", "posts", "-n", "3"], env=env, capture_output=True, text=True, timeout=60)
    assert tail.returncode == 0, tail.stderr
    lines = [json.loads(line) for line in tail.stdout.splitlines()]
    assert len(lines) == 3
    assert all(json.loads(line["value"]).get("v") == 1 or line["key"].startswith("bad-") for line in lines)
