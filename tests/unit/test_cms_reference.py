"""Reference sketches and the bucket TTL arithmetic the speed layer relies on."""

from __future__ import annotations

from speed.cells import CellCache
from speed.reference import reference_sketches
from trendcore.cms import SketchShape, cell_indexes
from trendcore.windows import HOUR_MS, MINUTE_MS, bucket_expire_at_s, hour_of_week, is_kept

SHAPE = SketchShape.from_error(0.001, 0.01)


def test_default_shape_is_about_54_kb():
    assert (SHAPE.width, SHAPE.depth, SHAPE.nbytes) == (2719, 5, 54_380)


def test_reference_adds_region_and_all_for_minutes_and_hours():
    sketches = reference_sketches({("x", "US", 60): 2, ("x", "FR", 61): 3}, SHAPE)
    assert sketches[("all", "h", 1)].estimate("x") == 5
    assert sketches[("US", "m", 60)].estimate("x") == 2 and ("FR", "m", 60) not in sketches
    assert sketches[("all", "m", 61)].total() == 3


def test_expiry_matches_is_kept():
    minute = 1_000_000
    expire_ms = bucket_expire_at_s(minute, "m", 120) * 1000
    assert is_kept(minute * MINUTE_MS, expire_ms - 1, "m", 120)
    assert not is_kept(minute * MINUTE_MS, expire_ms, "m", 120)


def test_hour_of_week_starts_monday():
    monday = 1_795_392_000_000 // HOUR_MS  # 2026-11-23T00:00Z, a Monday
    assert hour_of_week(monday) == 0 and hour_of_week(monday + 167) == 167 and hour_of_week(monday + 168) == 0


def test_cell_cache_equals_cell_indexes():
    cache = CellCache(SHAPE, limit=2)
    for tag in ("a", "b", "c", "a"):
        assert cache(tag) == cell_indexes(tag, SHAPE)
