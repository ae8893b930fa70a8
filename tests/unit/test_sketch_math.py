"""Count-min sketch math and window arithmetic (pure)."""

from __future__ import annotations

import random
from array import array
from collections import Counter

import pytest

from trendcore.cms import CountMinSketch, SketchShape, cell_indexes, decode_counters, error_bound, window_estimate
from trendcore.scoring import rank_changes, rise_score
from trendcore.windows import HOUR_MS, MINUTE_MS, is_kept, parse_hour, window_buckets


def test_shape_follows_eps_and_delta():
    shape = SketchShape.from_error(0.001, 0.01)
    assert (shape.width, shape.depth) == (2719, 5)
    assert shape.nbytes == 54_380


@pytest.mark.parametrize(("eps", "delta"), [(0, 0.1), (0.1, 1), (-1, 0.5)])
def test_shape_rejects_nonsense(eps, delta):
    with pytest.raises(ValueError):
        SketchShape.from_error(eps, delta)


def test_cell_indexes_are_one_per_row_and_stable():
    shape = SketchShape(100, 4)
    cells = cell_indexes("worldcup", shape)
    assert [c // 100 for c in cells] == [0, 1, 2, 3]
    assert cells == cell_indexes("worldcup", shape)


def test_estimates_never_undercount_and_respect_the_bound():
    shape = SketchShape.from_error(0.01, 0.01)
    rng = random.Random(5)
    truth = Counter(f"t{int(rng.paretovariate(1.1))}" for _ in range(20_000))
    sketch = CountMinSketch(shape)
    for tag, n in truth.items():
        sketch.add(tag, n)
    bound = error_bound(0.01, sketch.total())
    over = [sketch.estimate(t) - n for t, n in truth.items()]
    assert min(over) >= 0
    assert sum(o > bound for o in over) <= 0.01 * len(over) + 1
    assert sketch.total() == 20_000


def test_bytes_round_trip_big_endian_like_redis_bitfield():
    shape = SketchShape(8, 2)
    sketch = CountMinSketch(shape)
    sketch.add("a", 258)
    raw = sketch.to_bytes()
    first = cell_indexes("a", shape)[0]
    assert raw[first * 4 : first * 4 + 4] == (258).to_bytes(4, "big")
    assert CountMinSketch.from_bytes(shape, raw).counters == sketch.counters
    assert CountMinSketch.from_bytes(shape, raw[:5]).estimate("zzz") >= 0
    assert CountMinSketch.from_bytes(shape, None).total() == 0


def test_decoding_reads_past_the_end_as_zeros_and_ignores_extra_bytes():
    """Like BITFIELD GET on the same string: big-endian u32 cells, zeros past a short string's end."""
    shape = SketchShape(2, 2)
    assert decode_counters(shape, (1).to_bytes(4, "big") + b"\x00\x02") == array("I", [1, 2 << 16, 0, 0])
    assert decode_counters(shape, bytes(range(1, 21))).tolist() == [
        int.from_bytes(bytes(range(i, i + 4)), "big") for i in (1, 5, 9, 13)]
    assert decode_counters(shape, None) == decode_counters(shape, b"") == array("I", [0] * 4)


def test_merge_adds_and_window_sums_minima():
    shape = SketchShape(50, 3)
    one, two = CountMinSketch(shape), CountMinSketch(shape)
    one.add("x", 3)
    two.add("x", 4)
    assert window_estimate([one, two], "x") == 7
    one.merge(two)
    assert one.estimate("x") == 7
    with pytest.raises(ValueError):
        one.merge(CountMinSketch(SketchShape(51, 3)))


def test_counters_saturate_like_overflow_sat():
    sketch = CountMinSketch(SketchShape(4, 1))
    sketch.add("x", 2**32 + 5)
    assert sketch.estimate("x") == 2**32 - 1


def test_window_buckets_end_now():
    now = 100 * HOUR_MS + 30 * MINUTE_MS
    unit, buckets = window_buckets(now, "1h")
    assert unit == "m" and len(buckets) == 60 and buckets[-1] == now // MINUTE_MS
    unit, buckets = window_buckets(now, "24h")
    assert unit == "h" and buckets == list(range(77, 101))


def test_late_events_kept_while_their_bucket_is():
    now = 1000 * MINUTE_MS
    assert is_kept(now - 59 * MINUTE_MS, now, "m", 60)
    assert not is_kept(now - 60 * MINUTE_MS, now, "m", 60)


def test_parse_hour_accepts_short_and_long_forms():
    assert parse_hour("1970-01-01T01") == 1
    assert parse_hour("2026-11-29T19:00Z") == parse_hour("2026-11-29T19")


def test_rise_and_rank_change():
    assert rise_score(95, 0, a=5, b=10) == 10.0
    assert rank_changes({"a": 1, "b": 2}, ["b", "a", "c"]) == [1, -1, None]
