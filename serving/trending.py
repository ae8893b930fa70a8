"""Trending answers with single-flight refresh: whatever the concurrency, each worker reads a snapshot key
from Redis about once per cache TTL; concurrent requests for an expired key await that one read, and an
answer near its expiry is re-read in the background while it is still served (never older than the TTL)."""

from __future__ import annotations

import asyncio
import time

import redis
from starlette.concurrency import run_in_threadpool

from serving import store
from serving.cache import CachedAnswer, TrendingCache, TrendKey
from trendcore.keys import KeySpace


class TrendingReader:
    """The cache plus the one in-flight Redis read per key (a task, so a cancelled request cancels nothing)."""

    def __init__(self, cache: TrendingCache, client: redis.Redis, keys: KeySpace, misses) -> None:
        self.cache = cache
        self.client, self.keys = client, keys
        self.misses = misses
        self.inflight: dict[TrendKey, asyncio.Task] = {}

    async def answer(self, key: TrendKey, query: bytes | None) -> CachedAnswer:
        """A fresh cached answer, refreshing it from Redis once when expired; ServiceError when Redis fails."""
        found = self.cache.get(key)
        if found is not None:
            if query is not None:
                self.cache.remember(query, key)
            return found
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
        """Forget the finished read; a background read's error is dropped (the next request retries)."""
        self.inflight.pop(key, None)
        if not task.cancelled():
            task.exception()

    async def _refresh(self, key: TrendKey, query: bytes | None) -> CachedAnswer:
        self.misses.inc()
        snapshot = await run_in_threadpool(store.read_snapshot, self.client, self.keys, *key[:3])
        return self.cache.put(key, snapshot, query)
