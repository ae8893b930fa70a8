"""A full connection pool (threads a read budget abandoned while Redis stalls) reads as slow, not unreachable."""

from __future__ import annotations

import pytest
import redis

from adapters.redis import POOL_FULL, redis_errors
from serving.readiness import check_redis
from trendcore.errors import ServiceError


def full_client() -> redis.Redis:
    """A client whose one-connection pool is taken (made, never connected: no server is needed)."""
    client = redis.Redis(host="127.0.0.1", port=9, max_connections=1)
    client.connection_pool.make_connection()
    return client


def test_a_full_pool_is_wrapped_as_did_not_answer_in_time():
    with pytest.raises(ServiceError, match="did not answer in time") as caught, redis_errors("reading a snapshot"):
        full_client().get("k")
    assert str(caught.value) == f"Redis: reading a snapshot: {POOL_FULL}"
    assert isinstance(caught.value.__cause__, redis.exceptions.MaxConnectionsError)


def test_readiness_says_slow_for_a_full_pool_and_unreachable_for_a_refused_connection():
    assert check_redis(full_client()) == f"Redis {POOL_FULL}"
    refused = check_redis(redis.Redis(host="127.0.0.1", port=9, socket_connect_timeout=1))
    assert refused is not None and refused.startswith("Redis unreachable: ") and "did not answer" not in refused
