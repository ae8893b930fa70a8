"""Trending answers with single-flight refresh: whatever the concurrency, each worker reads a snapshot key
from Redis about once per cache TTL; concurrent requests for an expired key await that one read, and an
answer near its expiry is re-read in the background while it is still served (never older than the TTL)."""

from __future__ import annotations

import asyncio
import time

import redis

from serving import store
from serving.cache import CachedAnswer, TrendingCache, TrendKey
from serving.pools import Pools
from trendcore.errors import TrendsError
from trendcore.keys import KeySpace

FAILED_READ_S = 0.5
"""A failed read of a key is the answer for this long: the route after a failed fast path (or a crowd of requests
while Redis stalls) gets that error at once rather than waiting a second read budget."""


class TrendingReader:
    """The cache plus the one in-flight Redis read per key (a task, so a cancelled request cancels nothing)."""

    def __init__(self, cache: TrendingCache, client: redis.Redis, keys: KeySpace, misses, pools: Pools) -> None:
        self.cache = cache
        self.pools = pools
        self.client, self.keys = client, keys
        self.misses = misses
        self.inflight: dict[TrendKey, asyncio.Task] = {}
        self.failed: dict[TrendKey, tuple[float, TrendsError]] = {}

    async def answer(self, key: TrendKey, query: bytes | None) -> CachedAnswer:
        """A fresh cached answer, refreshing it from Redis once when expired; ServiceError when Redis fails."""
        found = self.cache.get(key)
        if found is not None:
            if query is not None:
                self.cache.remember(query, key)
            return found
        failure = self.failed.get(key)
        if failure is not None and failure[0] > time.monotonic():
            raise failure[1]
        return await asyncio.shield(self._start(key, query))

    def fresh(self, key: TrendKey) -> CachedAnswer | None:
        """The cached answer if still fresh (else None); starts a background re-read when it nears expiry."""
        found = self.cache.get(key)
        if found is not None and found.refresh_at <= time.monotonic() and key not in self.inflight:
            self._start(key, None)
        return found

    def _start(self, key: TrendKey, query: bytes | None) -> asyncio.Task:
        """The in-flight read of a key, started if none runs."""
        task = self.inflight.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._refresh(key, query))
            self.inflight[key] = task
            task.add_done_callback(lambda done: self._done(key, done))
        return task

    def _done(self, key: TrendKey, task: asyncio.Task) -> None:
        """Forget the finished read; its error is kept for FAILED_READ_S (then the next request retries)."""
        self.inflight.pop(key, None)
        error = None if task.cancelled() else task.exception()
        if isinstance(error, TrendsError):
            if len(self.failed) >= 4096:
                self.failed.clear()  # bounded, like the cache
            self.failed[key] = (time.monotonic() + FAILED_READ_S, error)
        else:
            self.failed.pop(key, None)

    async def _refresh(self, key: TrendKey, query: bytes | None) -> CachedAnswer:
        self.misses.inc()
        snapshot = await self.pools.read(store.read_snapshot, self.client, self.keys, *key[:3])
        return self.cache.put(key, snapshot, query)
