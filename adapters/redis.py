"""Redis client built from settings, with redis-py's own Retry and exponential backoff."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from trendcore.errors import ServiceError
from trendcore.settings import RedisSettings


@contextmanager
def redis_errors(action: str) -> Iterator[None]:
    """Re-raise redis-py errors as ServiceError, saying what we were doing."""
    try:
        yield
    except redis.RedisError as exc:
        raise ServiceError(f"Redis: {action} failed: {exc}") from exc


def client(settings: RedisSettings, **overrides) -> redis.Redis:
    """A client that retries connection errors and timeouts with exponential backoff."""
    options = dict(
        retry=Retry(ExponentialBackoff(cap=2.0, base=0.05), settings.retries),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
        socket_timeout=10,
        socket_connect_timeout=5,
        health_check_interval=30,
    )
    options.update(overrides)
    return redis.Redis.from_url(settings.url, **options)
