"""The fast path for GET /trending: a query string the route validated before is answered from the cache's
bytes (refreshed by the single-flight reader when expired) before FastAPI routes or validates anything; a
first-seen query, or a Redis failure, falls through to the route.

`TrendingHits` is the lookup and the counting; `TrendingFastPath` puts it in front of the app as ASGI
middleware, and `serving.rsgi` calls it straight from granian's RSGI interface. Hits are counted (requests
and cache outcome `fast`) but not timed, and the counts are added to the Prometheus counters at most once a
second (a counter increment costs more than the rest of the hit in multiprocess mode), so the hot path is a
dictionary lookup and the response."""

from __future__ import annotations

import time

from serving.cache import CachedAnswer
from serving.trending import TrendingReader
from trendcore.errors import TrendsError

HEADERS = [("content-type", "application/json"), ("cache-control", "max-age=1")]
"""The fast path's response headers (RSGI takes them as text; the ASGI middleware encodes them once)."""
_ASGI_HEADERS = [(k.encode(), v.encode()) for k, v in HEADERS]


class TrendingHits:
    """Answers for query strings seen before, and their counts."""

    def __init__(self, reader: TrendingReader, hits, served) -> None:
        self.reader = reader
        self.hits = hits
        self.served = served
        self.pending = 0
        self.flush_at = 0

    async def _known(self, query: bytes) -> CachedAnswer | None:
        """The answer of a query string validated before (refreshed once if expired), else None."""
        key = self.reader.cache.raw.get(query)
        if key is None:
            return None
        answer = self.reader.fresh(key)
        if answer is not None:
            return answer
        try:
            return await self.reader.answer(key, None)
        except TrendsError:
            return None  # the route answers, with the error

    async def serve(self, query: bytes) -> bytes | None:
        """The response body for a query string validated before (the hit counted), else None."""
        answer = await self._known(query)
        if answer is None:
            return None
        now_ms = int(time.time() * 1000)
        self._count(now_ms)
        return answer.body(now_ms)

    def _count(self, now_ms: int) -> None:
        """Count a hit; add the pending hits to the counters when a second has passed since the last flush."""
        self.pending += 1
        if now_ms >= self.flush_at:
            self.hits.inc(self.pending)
            self.served.inc(self.pending)
            self.pending, self.flush_at = 0, now_ms + 1000


class TrendingFastPath:
    """Pure ASGI middleware in front of the app; only exact cache hits take this path."""

    def __init__(self, app, hits: TrendingHits) -> None:
        self.app = app
        self.hits = hits

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"] == "/trending" and scope["method"] == "GET":
            body = await self.hits.serve(scope["query_string"])
            if body is not None:
                headers = [*_ASGI_HEADERS, (b"content-length", str(len(body)).encode())]
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
