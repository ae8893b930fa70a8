"""`trends up` against infrastructure it did not start (TRENDS_STACK__INFRA=external).

The session's Redis and Kafka play someone else's: a second stack home in tmp_path points at them, with its
own Redis database, topics, consumer group and service ports. It starts only the product's services there,
a post flows through to the API's count, and `down` stops those services and leaves the Redis and Kafka
running.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from urllib.parse import urlparse

import pytest
from kafka.admin import KafkaAdminClient

from adapters import kafka as kafka_io
from adapters import redis as redis_io
from trendcore.errors import StackError
from trendcore.events import format_time
from trendcore.settings import Settings
from trends.stack import manager

pytestmark = pytest.mark.integration
SERVICES = ["speed-workers", "speed-materializer", "api"]
EXTERNAL_DB = 3
"""The Redis database of the second stack; the session's tests use database 0."""


def _port(offset: int) -> int:
    """A port of the test range (PYTEST_TRENDS_BASE_PORT + offset, as tests/conftest.py derives its own): below
    the kernel's ephemeral range, so no JVM or client of a concurrent test can hold it when `status` looks."""
    return int(os.environ.get("PYTEST_TRENDS_BASE_PORT", "29000")) + offset


def _with_db(url: str, db: int) -> str:
    return f"{url.rsplit('/', 1)[0]}/{db}"


def _external(settings: Settings, home, **updates) -> Settings:
    """`settings` as a second stack in `home` that runs no infrastructure of its own."""
    stack = settings.stack.model_copy(update={"home": home, "infra": "external"})
    return settings.model_copy(update={"stack": stack, **updates})


@pytest.fixture
def external(stack: Settings, tmp_path) -> Iterator[Settings]:
    """A second stack on the session's Redis and Kafka: its own database, topics, group and ports, one worker."""
    run = uuid.uuid4().hex[:8]
    settings = _external(
        stack, tmp_path,
        redis=stack.redis.model_copy(update={"url": _with_db(stack.redis.url, EXTERNAL_DB)}),
        kafka=stack.kafka.model_copy(update={"posts_topic": f"ext-posts-{run}", "engagements_topic": f"ext-eng-{run}",
                                             "dead_letter_topic": f"ext-dead-{run}", "partitions": 2}),
        speed=stack.speed.model_copy(update={"group": f"ext-{run}", "workers": 1, "metrics_port": _port(60),
                                             "materializer_port": _port(61)}),
        api=stack.api.model_copy(update={"port": _port(62), "workers": 1, "wait_timeout_s": 30.0}),
    )
    try:
        yield settings
    finally:
        manager.down(settings, log=lambda _m: None)
        _drop(settings)


def _drop(settings: Settings) -> None:
    """Remove what the test made on the shared infrastructure: its topics and its Redis database."""
    admin = KafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap.split(","))
    try:
        existing = set(admin.list_topics())
        admin.delete_topics([t for t in settings.kafka.topics if t in existing])
    finally:
        admin.close()
    client = redis_io.client(settings.redis)
    client.flushdb()
    client.close()


def _http(settings: Settings, path: str, body: bytes | None = None, token: str | None = None) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {token}", "content-type": "application/json"} if token else {}
    request = urllib.request.Request(f"http://{settings.api.host}:{settings.api.port}{path}", data=body,
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=40) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _posts(tag: str, n: int) -> bytes:
    now = format_time(int(time.time() * 1000))
    return json.dumps([{"v": 1, "type": "post", "post_id": f"{tag}-{i}", "user_id": f"u{i}", "region": "US",
                        "text": f"external #{tag}", "created_at": now} for i in range(n)]).encode()


def _count(settings: Settings, tag: str, expected: int, timeout_s: float = 30.0) -> int:
    """The API's 1 h worldwide count of `tag`, polled until it reaches `expected` or the time is up."""
    deadline = time.monotonic() + timeout_s
    while True:
        status, doc = _http(settings, f"/tags/{tag}/count?window=1h&region=all")
        assert status == 200, doc
        if doc["count"] >= expected or time.monotonic() > deadline:
            return doc["count"]
        time.sleep(0.5)


def _states(settings: Settings) -> dict[str, str]:
    return {row["name"]: row["state"] for row in manager.status(settings)}


def _cli_status(settings: Settings) -> str:
    """`trends status` as an operator runs it, with the second stack's settings in the environment."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("TRENDS_")}, "COLUMNS": "250",
           "TRENDS_HOME": str(settings.home), "TRENDS_STACK__HOME": str(settings.stack.home),
           "TRENDS_STACK__INFRA": "external", "TRENDS_REDIS__URL": settings.redis.url,
           "TRENDS_KAFKA__BOOTSTRAP": settings.kafka.bootstrap}
    done = subprocess.run([sys.executable, "-m", "trends", "status"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_services_run_against_infrastructure_this_stack_did_not_start(stack, external):
    lines: list[str] = []
    manager.up(external, names=["redis", "kafka", *SERVICES], log=lines.append)
    redis_at = f"127.0.0.1:{urlparse(stack.redis.url).port}"
    assert any(line.startswith(f"redis: external, answers at {redis_at}") for line in lines), lines
    assert any(line.startswith("kafka: external, answers at") for line in lines), lines
    assert any(f"created topics {external.kafka.posts_topic}" in line for line in lines), lines
    assert not any((external.stack.home / "run" / f"{name}.pid").exists() for name in ("redis", "kafka"))
    states = _states(external)
    assert states["redis"] == states["kafka"] == manager.REACHABLE
    assert all(states[name] == "running" for name in SERVICES), states
    assert manager.REACHABLE in _cli_status(external)

    tag = "ext" + uuid.uuid4().hex[:10]
    token = (external.stack.home / "api-token").read_text().strip()
    status, answer = _http(external, "/posts?wait=true", body=_posts(tag, 5), token=token)
    assert status == 202 and answer["accepted"] == 5, answer
    assert all(r["topic"] == external.kafka.posts_topic for r in answer["records"])
    assert _count(external, tag, 5) == 5

    down: list[str] = []
    manager.down(external, log=down.append)
    assert "redis: external, left alone" in down and "kafka: external, left alone" in down, down
    after = _states(external)
    assert all(after[name] == "stopped" for name in SERVICES), after
    session = _states(stack)
    assert session["redis"] == session["kafka"] == "running"
    client = redis_io.client(stack.redis)
    assert client.ping()
    client.close()
    assert len(kafka_io.end_offsets(stack.kafka, stack.kafka.posts_topic)) == stack.kafka.partitions


def test_external_infrastructure_that_does_not_answer_is_named_and_nothing_starts(settings, tmp_path):
    nowhere = _external(settings, tmp_path,
                        redis=settings.redis.model_copy(update={"url": f"redis://:secret@127.0.0.1:{_port(63)}/0"}),
                        kafka=settings.kafka.model_copy(update={"bootstrap": f"127.0.0.1:{_port(64)}"}))
    with pytest.raises(StackError, match="TRENDS_REDIS__URL") as refused:
        manager.up(nowhere, log=lambda _m: None)
    assert "secret" not in str(refused.value)
    with pytest.raises(StackError, match="TRENDS_KAFKA__BOOTSTRAP"):
        manager.up(nowhere, names=["kafka"], log=lambda _m: None)
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").glob("*.pid"))
    states = _states(nowhere)
    assert states["redis"] == states["kafka"] == manager.UNREACHABLE


def test_external_redis_refusing_the_credentials_is_named(stack, tmp_path):
    """The port answers, the PING does not: a user the session's Redis does not know (a password alone is
    accepted by a Redis that has none: redis-py ignores that refusal)."""
    url = stack.redis.url.replace("//", "//nobody:wrong@", 1)
    wrong = _external(stack, tmp_path, redis=stack.redis.model_copy(update={"url": url}))
    with pytest.raises(StackError, match="answers but .*TRENDS_REDIS__URL") as refused:
        manager.up(wrong, names=["redis"], log=lambda _m: None)
    assert "wrong" not in str(refused.value)


def test_down_with_external_infrastructure_never_stops_it(stack, tmp_path):
    """A home whose PID files say it started the session's Redis and Kafka (a local run before the switch to
    external) still leaves them alone, and says that they run."""
    (tmp_path / "run").mkdir()
    for name in ("redis", "kafka"):
        own = manager.components(stack)[name].service(stack).pid_file
        (tmp_path / "run" / own.name).write_text(own.read_text())
    lines: list[str] = []
    manager.down(_external(stack, tmp_path), log=lines.append)
    assert any(line.startswith("redis: external, left alone (a local redis") for line in lines), lines
    assert _states(stack)["redis"] == _states(stack)["kafka"] == "running"
