"""In-process cache of trending answers as ready-made JSON bytes (at most `ttl_s` old).

A snapshot is parsed once per second per (region, window, rank, k); every request in between gets
the cached bytes with only the age spliced in, so no request re-serialises JSON. The raw query
string is indexed too, so the ASGI fast path serves a repeat request without parsing anything.
"""

from __future__ import annotations

import time

import orjson

TrendKey = tuple[str, str, str, int]
_MAX_RAW = 4096
REFRESH_SHARE = 0.75
"""An answer is re-read in the background once this share of its TTL has passed, so requests rarely wait."""


class CachedAnswer:
    """One cached answer: when it expires (monotonic s), its snapshot time and the JSON after `age_s`."""

    __slots__ = ("expires", "refresh_at", "computed_at_ms", "tail", "_memo")

    def __init__(self, expires: float, computed_at_ms: int | None, tail: bytes,
                 refresh_at: float | None = None) -> None:
        self.expires = expires
        self.refresh_at = expires if refresh_at is None else refresh_at
        self.computed_at_ms = computed_at_ms
        self.tail = tail
        self._memo: tuple[int, bytes] = (-1, b"")

    def body(self, now_ms: int) -> bytes:
        """The response `{"age_s": <age>, ...tail}`, by byte concatenation, rebuilt at most every 100 ms."""
        tick = now_ms // 100
        if self._memo[0] == tick:
            return self._memo[1]
        if self.computed_at_ms is None:
            age = b"null"
        else:
            age = str(round(max(0, now_ms - self.computed_at_ms) / 1000, 1)).encode()
        body = b'{"age_s":' + age + b"," + self.tail[1:]
        self._memo = (tick, body)
        return body


def answer_tail(snapshot: bytes | None, key: TrendKey) -> tuple[int | None, bytes]:
    """Slice a snapshot to k entries once; an absent snapshot gives an empty, dated-null answer."""
    region, window, rank, k = key
    doc = _load(snapshot)
    if doc is None:
        doc = {"region": region, "window": window, "rank": rank, "computed_at": None, "computed_at_ms": None,
               "total": 0, "error_bound": 0, "entries": [], "rebuilding": None}
    doc["k"] = k
    doc["entries"] = list(doc.get("entries") or [])[:k]
    computed = doc.get("computed_at_ms")
    return (computed if isinstance(computed, int) else None), orjson.dumps(doc)


def _load(snapshot: bytes | None) -> dict | None:
    """The snapshot document, or None when absent or not a JSON object (never a crash on bad data)."""
    if not snapshot:
        return None
    try:
        doc = orjson.loads(snapshot)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


class TrendingCache:
    """Answers by canonical key, plus an index from raw query strings to canonical keys."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self.answers: dict[TrendKey, CachedAnswer] = {}
        self.raw: dict[bytes, TrendKey] = {}

    def get(self, key: TrendKey) -> CachedAnswer | None:
        """A fresh answer or None."""
        found = self.answers.get(key)
        if found is None or found.expires <= time.monotonic():
            return None
        return found

    def get_raw(self, query: bytes) -> CachedAnswer | None:
        """A fresh answer for a query string seen before, or None (the route then parses it)."""
        key = self.raw.get(query)
        return None if key is None else self.get(key)

    def put(self, key: TrendKey, snapshot: bytes | None, query: bytes | None = None) -> CachedAnswer:
        """Store the answer built from a snapshot just read; remember the raw query string."""
        computed, tail = answer_tail(snapshot, key)
        now = time.monotonic()
        answer = CachedAnswer(now + self.ttl_s, computed, tail, refresh_at=now + self.ttl_s * REFRESH_SHARE)
        if len(self.answers) >= _MAX_RAW:
            self.answers.clear()
        self.answers[key] = answer
        if query is not None:
            self.remember(query, key)
        return answer

    def remember(self, query: bytes, key: TrendKey) -> None:
        """Index a validated raw query string (bounded: the index is dropped when full)."""
        if len(self.raw) >= _MAX_RAW and query not in self.raw:
            self.raw.clear()
        self.raw[query] = key
