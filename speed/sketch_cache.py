"""What the materializer has read of each bucket, kept while the bucket's total is unchanged.

The atomic step that adds to a bucket's sketch and candidates adds the same mentions to its total,
so an unchanged total means unchanged contents: a closed minute is read from Redis once instead of
every round, and read again only when a late event changes it. Counters are numpy rows, so a
window's estimates for all its candidates are one gather (`sum_of_minima`), not a loop per tag.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import numpy as np

from trendcore.cms import SketchShape, decode_counters

V = TypeVar("V")


def counters(shape: SketchShape, raw: bytes | None) -> np.ndarray:
    """A Redis sketch string as native uint32 counters: `trendcore.cms.decode_counters`, viewed by numpy
    (no copy)."""
    return np.frombuffer(decode_counters(shape, raw), dtype=np.uint32)


def sum_of_minima(rows: list[np.ndarray], cells: list[list[int]]) -> np.ndarray:
    """Window estimate per tag: the sum over buckets of the minimum over the tag's cells (never low).

    `rows` are the buckets' counters, `cells` each tag's `depth` cell indexes; returns int64 per tag.
    A vectorised copy of `trendcore.cms.window_estimate`, its oracle (one gather for every tag of a
    window instead of a loop per tag and bucket); tests/unit/test_sketch_cache.py holds it to it.
    """
    if not rows or not cells:
        return np.zeros(len(cells), dtype=np.int64)
    index = np.asarray(cells, dtype=np.intp)  # (tags, depth)
    return np.stack(rows)[:, index].min(axis=2).sum(axis=0, dtype=np.int64)


class BucketCache(Generic[V]):
    """Values by Redis key with the bucket total they were read at; at most `limit` (least recently used
    out)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.values: dict[str, tuple[int, V]] = {}
        self.epoch: str | None = None
        self.reads = 0  # values fetched from Redis, for tests and profiling
        self.used: set[str] | None = None  # names read since `begin_round` (None: no round open)

    def check_epoch(self, epoch: str | None) -> None:
        """Forget everything when the epoch sentinel changed or vanished (Redis lost its data)."""
        if epoch is None or epoch != self.epoch:
            self.values.clear()
        self.epoch = epoch

    def begin_round(self) -> None:
        """Start noting the names a round reads; `end_round` drops the others."""
        self.used = set()

    def end_round(self) -> None:
        """Drop the values the round did not read: a bucket that left every window never comes back into one,
        so the cache holds the windows' buckets only and its memory is flat once they are full (the LRU
        `limit` alone let it grow to `limit` sketches, about 1 MB a minute in the 30-minute soak)."""
        if self.used is not None:
            for name in [n for n in self.values if n not in self.used]:
                del self.values[name]
        self.used = None

    def missing(self, names: list[str], totals: list[int]) -> list[str]:
        """Keys to fetch: a non-zero total that differs from the one their cached value was read at."""
        values = self.values
        return [n for n, t in zip(names, totals, strict=True) if t and (n not in values or values[n][0] != t)]

    def put(self, name: str, total: int, value: V) -> V:
        """Keep a value read *after* its total: if a step landed in between, the total is behind the
        value, differs next round, and the key is read again (never a stale value under a fresh total)."""
        self.values.pop(name, None)
        self.reads += 1
        if self.limit > 0:
            if len(self.values) >= self.limit:
                del self.values[next(iter(self.values))]
            self.values[name] = (total, value)
        return value

    def get(self, name: str) -> V | None:
        """The cached value, now the most recently used (the oldest used goes first when full)."""
        found = self.values.pop(name, None)
        if found is None:
            return None
        self.values[name] = found
        return found[1]

    def read(self, names: list[str], totals: list[int], fetch: Callable[[list[str]], list[V]]) -> list[V | None]:
        """The value of each key (None where the total is 0): cached, or fetched when its total moved.

        The caller reads `totals` before calling, so `fetch` always runs after them (see `put`)."""
        if self.used is not None:
            self.used.update(names)
        stale = self.missing(names, totals)
        found = {n: self.get(n) for n, t in zip(names, totals, strict=True) if t}
        if stale:
            total_of = dict(zip(names, totals, strict=True))
            for name, value in zip(stale, fetch(stale), strict=True):
                found[name] = self.put(name, total_of[name], value)
        return [found.get(n) for n in names]
