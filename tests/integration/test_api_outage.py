"""Redis and Kafka unreachable (nothing listens on their ports): answers are 503 naming the dependency,
never another 5xx, and the process stays live."""

from __future__ import annotations

import socket
import time

import pytest
from fastapi.testclient import TestClient

from serving.app import create_app
from trendcore.events import format_time

pytestmark = pytest.mark.integration


def closed_port() -> int:
    """A local port nothing listens on (bound and released just now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def api(settings):
    down = settings.model_copy(update={
        "redis": settings.redis.model_copy(update={"url": f"redis://127.0.0.1:{closed_port()}/0", "retries": 0}),
        "kafka": settings.kafka.model_copy(update={"bootstrap": f"127.0.0.1:{closed_port()}"}),
        "api": settings.api.model_copy(update={"token": "t", "produce_timeout_s": 1.0}),
    })
    with TestClient(create_app(down)) as client:
        yield client


@pytest.mark.parametrize("path", ["/trending", "/tags/abc/count", "/tags/abc/series", "/tags/abc/posts"])
def test_reads_answer_503_naming_redis(api, path):
    reply = api.get(path)
    assert reply.status_code == 503 and reply.json()["detail"].startswith("Redis:")


def test_writes_answer_503_naming_kafka(api):
    record = {"v": 1, "type": "post", "post_id": "p1", "user_id": "u", "region": "US", "text": "#x",
              "created_at": format_time(int(time.time() * 1000))}
    reply = api.post("/posts", json=record, headers={"Authorization": "Bearer t"})
    assert reply.status_code == 503 and "Kafka" in reply.json()["detail"]


def test_readiness_names_both_and_liveness_holds(api):
    reply = api.get("/readyz")
    assert reply.status_code == 503
    checks = reply.json()["checks"]
    assert "Redis unreachable" in checks["redis"] and "Kafka unreachable" in checks["kafka"]
    assert api.get("/healthz").status_code == 200 and api.get("/").status_code == 200
