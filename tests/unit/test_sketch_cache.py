"""The materializer's sketch cache and vectorised re-scoring against the pure sketch math."""

from __future__ import annotations

import random

from speed.sketch_cache import BucketCache, counters, sum_of_minima
from trendcore.cms import CountMinSketch, SketchShape, cell_indexes, decode_counters, window_estimate

SHAPE = SketchShape(width=97, depth=4)


def _sketch(seed: int, tags: list[str]) -> CountMinSketch:
    rng = random.Random(seed)
    sketch = CountMinSketch(SHAPE)
    for _ in range(500):
        sketch.add(rng.choice(tags), rng.randint(1, 1000))
    return sketch


def test_counters_read_redis_bytes_like_the_pure_sketch() -> None:
    sketch = _sketch(1, [f"t{i}" for i in range(50)])
    raw = sketch.to_bytes()
    assert counters(SHAPE, raw).tolist() == list(sketch.counters)
    short = counters(SHAPE, raw[:40])  # BITFIELD strings can be shorter than the shape: zeros after
    assert short.tolist() == list(sketch.counters[:10]) + [0] * (SHAPE.cells - 10)
    assert not counters(SHAPE, None).any()


def test_counters_are_the_core_decoding_for_any_length() -> None:
    """trendcore.cms.decode_counters is the one decoding of sketch bytes; the numpy rows must equal it
    for full, short (even mid-counter), over-long and missing strings."""
    rng = random.Random(3)
    raw = bytes(rng.getrandbits(8) for _ in range(SHAPE.nbytes + 9))
    for cut in (None, 0, 1, 7, 40, 41, SHAPE.nbytes - 1, SHAPE.nbytes, SHAPE.nbytes + 9):
        piece = None if cut is None else raw[:cut]
        row = counters(SHAPE, piece)
        assert row.dtype == "uint32" and row.tolist() == list(decode_counters(SHAPE, piece)), cut


def test_sum_of_minima_equals_the_window_estimate_of_every_tag() -> None:
    tags = [f"t{i}" for i in range(200)]
    sketches = [_sketch(seed, tags) for seed in range(6)]
    rows = [counters(SHAPE, s.to_bytes()) for s in sketches]
    got = sum_of_minima(rows, [cell_indexes(t, SHAPE) for t in tags])
    assert got.tolist() == [window_estimate(sketches, t) for t in tags]
    assert sum_of_minima([], [cell_indexes("a", SHAPE)]).tolist() == [0]


def test_a_value_is_read_again_only_when_its_total_moved() -> None:
    cache: BucketCache[str] = BucketCache(limit=10)
    names, totals = ["a", "b", "c"], [5, 0, 7]
    assert cache.missing(names, totals) == ["a", "c"]  # an empty bucket is never read
    cache.put("a", 5, "A")
    cache.put("c", 7, "C")
    assert cache.missing(names, totals) == []
    assert cache.missing(names, [5, 0, 8]) == ["c"]  # a late event changed c
    assert cache.get("b") is None and cache.get("a") == "A" and cache.reads == 2


def test_epoch_change_or_loss_forgets_everything() -> None:
    cache: BucketCache[str] = BucketCache(limit=10)
    cache.check_epoch("e1")
    cache.put("a", 5, "A")
    cache.check_epoch("e1")
    assert cache.missing(["a"], [5]) == []
    cache.check_epoch(None)  # FLUSHALL: the sentinel is gone
    assert cache.missing(["a"], [5]) == ["a"]
    cache.put("a", 5, "A")
    cache.check_epoch("e2")  # rebuilt under a new epoch
    assert cache.missing(["a"], [5]) == ["a"]


def test_the_cache_is_bounded_least_recently_used_out() -> None:
    cache: BucketCache[str] = BucketCache(limit=2)
    for name in ("a", "b", "c"):
        cache.put(name, 1, name.upper())
    assert list(cache.values) == ["b", "c"]
    assert cache.get("b") == "B"  # used: c is now the oldest
    cache.put("d", 1, "D")
    assert list(cache.values) == ["b", "d"]
    off: BucketCache[str] = BucketCache(limit=0)  # caching off: values are still returned
    assert off.put("a", 1, "A") == "A" and not off.values


def test_read_fetches_only_what_moved_and_keeps_key_order() -> None:
    cache: BucketCache[str] = BucketCache(limit=10)
    asked: list[list[str]] = []

    def fetch(stale: list[str]) -> list[str]:
        asked.append(stale)
        return [name.upper() for name in stale]

    assert cache.read(["a", "b", "c"], [1, 0, 2], fetch) == ["A", None, "C"]
    assert cache.read(["a", "b", "c"], [1, 0, 3], fetch) == ["A", None, "C"]
    assert asked == [["a", "c"], ["c"]]


def test_a_round_keeps_only_the_values_it_read() -> None:
    cache: BucketCache[str] = BucketCache(limit=10)
    cache.read(["m1", "m2", "m3"], [1, 1, 1], lambda stale: [n.upper() for n in stale])
    cache.begin_round()  # the window moved on: m1 left it, m4 came in
    assert cache.read(["m2", "m3", "m4"], [1, 1, 1], lambda stale: [n.upper() for n in stale]) == ["M2", "M3", "M4"]
    cache.end_round()
    assert sorted(cache.values) == ["m2", "m3", "m4"] and cache.reads == 4
    cache.end_round()  # no round open: nothing dropped
    assert sorted(cache.values) == ["m2", "m3", "m4"]
