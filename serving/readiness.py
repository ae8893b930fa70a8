"""Readiness checks: Redis answers, Kafka answers a metadata request with our credentials, the probe snapshot
is fresh."""

from __future__ import annotations

import socket
import time

import orjson
import redis

from adapters import kafka as kafka_io
from adapters import redis as redis_io
from adapters.redis import redis_errors
from trendcore.errors import ServiceError
from trendcore.keys import KeySpace
from trendcore.settings import Settings


def check_redis(client: redis.Redis) -> str | None:
    """None when Redis answers PING, else why not."""
    try:
        with redis_errors("PING"):
            client.ping()
        return None
    except ServiceError as exc:
        if isinstance(exc.__cause__, redis.exceptions.MaxConnectionsError):
            return f"Redis {redis_io.POOL_FULL}"  # reachable, but slow
        return f"Redis unreachable: {exc.__cause__ or exc}"  # the client's own reason, not our wrapper's prefix


def check_kafka(settings: Settings, timeout_s: float = 2.0) -> str | None:
    """None when a broker answers a metadata request made with the configured security (TLS, SASL), else why
    not: a broker that accepts connections but refuses our credentials is not ready for us. A TCP probe
    first, so that a broker nobody listens for is reported at once, not after the client's retries."""
    if not _any_accepts(settings.kafka.bootstrap, timeout_s / 2):
        return f"Kafka unreachable at {settings.kafka.bootstrap}"
    try:
        kafka_io.ping(settings.kafka, timeout_s)
        return None
    except ServiceError as exc:
        reason = str(exc)
        if reason.startswith("Kafka authentication failed"):
            return reason.replace("Kafka authentication failed", "authentication failed", 1)
        return f"Kafka unreachable at {settings.kafka.bootstrap}: {exc.__cause__ or exc}"


def _any_accepts(bootstrap: str, timeout_s: float) -> bool:
    """True when one of the bootstrap servers accepts a TCP connection."""
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
                return True
        except (OSError, ValueError):
            continue
    return False


def snapshot_age_s(client: redis.Redis, settings: Settings) -> float | None:
    """Age of the probe snapshot in seconds (None when missing or unreadable)."""
    region, window, rank = settings.api.readiness_probe.split(":")
    try:
        with redis_errors("reading the probe snapshot"):
            raw = client.get(KeySpace.of(settings).trending(region, window, rank))
        computed = orjson.loads(raw).get("computed_at_ms") if raw else None
    except (ServiceError, orjson.JSONDecodeError, AttributeError):
        return None
    return max(0.0, time.time() - computed / 1000) if isinstance(computed, int) else None


def redis_readiness(client: redis.Redis, settings: Settings) -> dict[str, str]:
    """The Redis checks alone (Redis answers, the probe snapshot is fresh): the part a read budget bounds."""
    checks = {"redis": check_redis(client) or "ok"}
    if checks["redis"] == "ok":
        age = snapshot_age_s(client, settings)
        limit = settings.api.max_snapshot_age_s
        if age is None:
            probe = settings.api.readiness_probe
            checks["snapshot"] = f"no trending snapshot {probe} yet (is the speed layer running?)"
        else:
            checks["snapshot"] = "ok" if age <= limit else f"snapshot {age:.0f} s old (limit {limit:g} s)"
    return checks
