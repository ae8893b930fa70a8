"""What routes depend on: one Services object per app (settings, Redis, lazy Kafka producer, cache,
rate limiter, metrics), built by `create_app` and handed to routes through FastAPI dependencies."""

from __future__ import annotations

import hmac
import threading
from dataclasses import dataclass, field
from typing import Annotated

import redis
from fastapi import Depends, Request

from adapters import kafka as kafka_io
from adapters import redis as redis_io
from serving.cache import TrendingCache
from serving.errors import Unauthorized
from serving.metrics import ApiMetrics
from serving.pools import Pools
from serving.ratelimit import TokenBuckets
from serving.trending import TrendingReader
from trendcore.errors import ServiceError
from trendcore.keys import KeySpace
from trendcore.settings import Settings


@dataclass
class Services:
    """Everything a request may need; connections are made lazily, never at import time."""

    settings: Settings
    redis: redis.Redis
    keys: KeySpace  # the names of every Redis key read (redis.key_prefix)
    cache: TrendingCache
    limiter: TokenBuckets
    metrics: ApiMetrics
    token: str | None
    trending: TrendingReader
    pools: Pools  # read and write threads, and the read budget
    _producer: kafka_io.Producer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def producer(self) -> kafka_io.Producer:
        """The idempotent producer (acks=all), created on the first write, its delivery reports served by one
        background thread (each request waits for its own records' reports, never flushes the queue)."""
        with self._lock:
            if self._producer is None:
                timeout_ms = int(self.settings.api.produce_timeout_s * 1000)
                options = {"message.timeout.ms": timeout_ms, "linger.ms": 2}
                self._producer = kafka_io.producer(self.settings.kafka, **options)
                self._producer.start_polling()
            return self._producer

    def close(self) -> None:
        """Flush pending writes (bounded) and drop connections."""
        if self._producer is not None:
            self._producer.stop_polling()
            try:
                self._producer.flush(self.settings.api.produce_timeout_s)
            except ServiceError:
                pass  # shutting down: nobody is left to tell
            self._producer = None  # librdkafka stops its threads when the producer is collected
        self.redis.close()


def build_services(settings: Settings) -> Services:
    """Services from settings: the Redis client (connects on first use) and the configured token."""
    api = settings.api
    client = redis_io.client(settings.redis, socket_timeout=min(2.0, api.read_budget_s), socket_connect_timeout=1)
    cache, metrics = TrendingCache(api.cache_ttl_s), ApiMetrics()
    keys = KeySpace.of(settings)
    pools = Pools(api.read_threads, api.write_threads, api.read_budget_s)
    return Services(
        settings=settings,
        redis=client,
        keys=keys,
        cache=cache,
        limiter=TokenBuckets(api.write_rate_per_s, api.write_burst),
        metrics=metrics,
        token=read_token(settings),
        trending=TrendingReader(cache, client, keys, metrics.cache.labels("miss"), pools),
        pools=pools,
    )


def read_token(settings: Settings) -> str | None:
    """The bearer token: `api.token`, else the first line of `api.token_file`, else None (writes refused)."""
    if settings.api.token:
        return settings.api.token
    path = settings.api.token_file
    if path is not None and path.exists():
        return path.read_text().strip() or None
    return None


async def services(request: Request) -> Services:
    """The app's Services (async: a plain function would cost each request a trip through the thread pool)."""
    return request.app.state.services


ServicesDep = Annotated[Services, Depends(services)]


def check_writer(request: Request, svc: Services) -> None:
    """Bearer token first (401), then the client's token bucket (429)."""
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    if svc.token is None:
        raise Unauthorized("writes are disabled: no token configured (TRENDS_API__TOKEN or TRENDS_API__TOKEN_FILE)")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), svc.token.encode()):
        raise Unauthorized("missing or wrong bearer token (Authorization: Bearer <token>)")
    svc.limiter.take(request.client.host if request.client else "unknown")
