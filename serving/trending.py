"""Trending answers with single-flight refresh: whatever the concurrency, each worker reads a snapshot key
from Redis at most once per cache TTL; concurrent requests for an expired key await that one read."""

from __future__ import annotations

import asyncio

import redis
from starlette.concurrency import run_in_threadpool

from serving import store
from serving.cache import CachedAnswer, TrendingCache, TrendKey


class TrendingReader:
    """The cache plus the one in-flight Redis read per key (a task, so a cancelled request cancels nothing)."""

    def __init__(self, cache: TrendingCache, client: redis.Redis, misses) -> None:
        self.cache = cache
        self.client = client
        self.misses = misses
        self.inflight: dict[TrendKey, asyncio.Task] = {}

    async def answer(self, key: TrendKey, query: bytes | None) -> CachedAnswer:
        """A fresh cached answer, refreshing it from Redis once when expired; ServiceError when Redis fails."""
        found = self.cache.get(key)
        if found is not None:
            if query is not None:
                self.cache.remember(query, key)
            return found
        task = self.inflight.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._refresh(key, query))
            self.inflight[key] = task
            task.add_done_callback(lambda _done: self.inflight.pop(key, None))
        return await asyncio.shield(task)

    async def _refresh(self, key: TrendKey, query: bytes | None) -> CachedAnswer:
        self.misses.inc()
        snapshot = await run_in_threadpool(store.read_snapshot, self.client, *key[:3])
        return self.cache.put(key, snapshot, query)
