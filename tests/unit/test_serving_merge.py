"""Pure serving logic: bucket plans, exact-over-approx merging, bounds, parameters, cache bytes, rate limits."""

from __future__ import annotations

import orjson
import pytest

from serving.cache import TrendingCache
from serving.errors import BadRequest, RateLimited
from serving.merge import Bucket, Segment, combine, is_retained, range_plan, regroup, source_of, window_plan
from serving.params import hour_bound, hour_range, past_day, region_code, tag_key
from serving.ratelimit import TokenBuckets
from serving.schemas import TrendingAnswer
from trendcore.settings import Settings
from trendcore.settings.speed import SpeedSettings
from trendcore.windows import DAY_MS, HOUR_MS, MINUTE_MS

NOW = 1_795_982_405_000  # 2026-11-29T20:00:05Z


def test_window_plan_1h_is_the_last_60_minutes():
    plan = window_plan(NOW, "1h")
    assert len(plan) == 60 and {b.unit for b in plan} == {"m"}
    assert plan[-1].start_ms <= NOW < plan[-1].end_ms


def test_range_plan_uses_days_for_whole_days_only():
    day_start = (NOW // HOUR_MS) // 24 * 24
    plan = range_plan(day_start - 2, day_start + 25)
    assert [b.unit for b in plan] == ["h", "h", "d", "h"]
    assert plan[2] == Bucket("d", day_start // 24)


def test_combine_exact_overrides_and_bounds():
    a = Segment(Bucket("h", 1), "exact", 100)
    b = Segment(Bucket("h", 2), "approx", 50, total=10_000)
    answer = combine([a, b], eps=0.001)
    assert (answer.count, answer.upper_bound, answer.lower_bound, answer.source) == (150, 150, 140, "mixed")


def test_source_of_ignores_missing_segments():
    missing = Segment(Bucket("h", 0), "missing", 0)
    assert source_of([missing, Segment(Bucket("h", 1), "exact", 3)]) == "exact"
    assert source_of([missing]) == "missing"
    assert source_of([Segment(Bucket("m", 1), "approx", 3)]) == "approx"


def test_retention_follows_the_speed_layers_keep_hours(monkeypatch):
    monkeypatch.setenv("TRENDS_SPEED__KEEP_HOURS", "48")
    speed, hour = Settings().speed, NOW // HOUR_MS
    assert is_retained(Bucket("h", hour - 40), NOW, speed)
    assert is_retained(Bucket("h", hour - 47), NOW, speed)
    assert not is_retained(Bucket("h", hour - 48), NOW, speed) and not is_retained(Bucket("h", hour - 49), NOW, speed)


def test_retention_defaults_match_the_keys_ttl():
    speed, hour, minute = SpeedSettings(), NOW // HOUR_MS, NOW // MINUTE_MS
    assert is_retained(Bucket("h", hour - 25), NOW, speed) and not is_retained(Bucket("h", hour - 26), NOW, speed)
    assert is_retained(Bucket("m", minute - 119), NOW, speed) and not is_retained(Bucket("m", minute - 120), NOW, speed)
    assert not is_retained(Bucket("d", NOW // DAY_MS), NOW, speed)  # days have no sketches


def test_lower_bound_never_negative():
    assert combine([Segment(Bucket("m", 1), "approx", 2, total=100_000)], 0.001).lower_bound == 0


def test_regroup_by_step():
    segs = [Segment(Bucket("m", i), "approx", 1) for i in range(10)]
    groups = regroup(segs, 5 * MINUTE_MS)
    assert [len(g) for _, g in groups] == [5, 5]


@pytest.mark.parametrize("raw", ["#Café", "café", "CAFÉ", "＃ｃａｆé", "  #cafe\u0301 "])
def test_tag_key_normalises_spellings(raw):
    assert tag_key(raw) == "café"


@pytest.mark.parametrize("raw", ["", "#", "123", "x" * 141])
def test_tag_key_refuses_non_tags(raw):
    with pytest.raises(BadRequest):
        tag_key(raw)


def test_region_code():
    assert region_code("US") == "US" and region_code("all") == "all"
    with pytest.raises(BadRequest, match="region"):
        region_code("XX")
    with pytest.raises(BadRequest, match="region"):
        region_code("us")


def test_hour_range_checks():
    first, last = hour_range("2026-11-28", "2026-11-29T01:00Z", NOW)
    assert last - first == 25
    for start, end, match in [("2026-11-29T19:30Z", "2026-11-29T20", "boundary"),
                              ("2026-11-29T20", "2026-11-29T19", "after"),
                              ("2026-10-01", "2026-11-29", "31 days"), ("2026-11-29T19", "2026-11-30", "future"),
                              ("yesterday", "2026-11-29", "UTC hour")]:
        with pytest.raises(BadRequest, match=match):
            hour_range(start, end, NOW)


def test_hour_bound_names_the_field_in_the_core_parsers_message():
    assert hour_bound("2026-11-29T19:00Z", "from") == hour_bound("2026-11-29T19", "to") == NOW // HOUR_MS - 1
    with pytest.raises(BadRequest, match=r"^to: 'soon' is not a UTC hour"):
        hour_bound("soon", "to")
    with pytest.raises(BadRequest, match=r"^from: '2026-11-29T19:30Z' is not on an hour boundary"):
        hour_bound("2026-11-29T19:30Z", "from")


def test_past_day_accepts_today_and_earlier_written_in_full():
    today = NOW // DAY_MS
    assert past_day("2026-11-29", NOW) == today and past_day(" 2026-11-28 ", NOW) == today - 1
    for raw in ("tomorrow", "2026-11-30", "20261128", "2026-11-28T00"):
        with pytest.raises(BadRequest, match=r"^day: "):
            past_day(raw, NOW)


def test_cache_splices_age_into_cached_bytes():
    cache = TrendingCache(ttl_s=1.0)
    snapshot = orjson.dumps({"region": "all", "window": "1h", "rank": "volume", "computed_at_ms": NOW - 2500,
                             "entries": [{"rank": i, "tag": f"t{i}", "count": 10 - i} for i in range(1, 6)]})
    answer = cache.put(("all", "1h", "volume", 3), snapshot, b"k=3")
    doc = orjson.loads(answer.body(NOW))
    assert doc["age_s"] == 2.5 and doc["k"] == 3 and [e["tag"] for e in doc["entries"]] == ["t1", "t2", "t3"]
    assert cache.get_raw(b"k=3") is answer and cache.get_raw(b"k=4") is None


def test_cache_answers_missing_or_corrupt_snapshot_with_empty_list():
    cache = TrendingCache(ttl_s=1.0)
    for raw in (None, b"not json", b"[1]"):
        doc = orjson.loads(cache.put(("US", "24h", "rise", 10), raw).body(NOW))
        assert doc["entries"] == [] and doc["age_s"] is None and doc["region"] == "US"


def test_cached_answers_follow_the_documented_model():
    """The bytes GET /trending serves, with or without a snapshot, are what its OpenAPI model says."""
    entry = {"rank": 1, "tag": "a", "display": "A", "count": 9, "upper_bound": 9, "lower_bound": 4, "source": "approx",
             "authors": 3, "rank_change": None, "score": None, "baseline": None}
    snapshot = {"region": "all", "window": "1h", "rank": "volume", "computed_at": "2026-11-29T20:00:00Z",
                "computed_at_ms": NOW, "total": 9, "error_bound": 5, "entries": [entry, {**entry, "rank": 2}]}
    cache = TrendingCache(ttl_s=1.0)
    served = TrendingAnswer.model_validate_json(cache.put(("all", "1h", "volume", 1), orjson.dumps(snapshot)).body(NOW))
    assert served.k == 1 and served.age_s == 0.0 and [e.tag for e in served.entries] == ["a"]
    empty = TrendingAnswer.model_validate_json(cache.put(("US", "24h", "rise", 5), None).body(NOW))
    assert (empty.computed_at, empty.computed_at_ms, empty.total, empty.entries) == (None, None, 0, [])


def test_cache_expires():
    cache = TrendingCache(ttl_s=0.0)
    cache.put(("all", "1h", "volume", 10), None, b"")
    assert cache.get(("all", "1h", "volume", 10)) is None


def test_token_bucket_refuses_after_burst_then_refills():
    buckets = TokenBuckets(rate=2.0, burst=3)
    for _ in range(3):
        buckets.take("a", now=100.0)
    with pytest.raises(RateLimited) as exc:
        buckets.take("a", now=100.0)
    assert 0 < exc.value.retry_after_s <= 0.5
    buckets.take("b", now=100.0)
    buckets.take("a", now=100.6)


def test_cache_index_of_raw_queries_stays_bounded():
    cache = TrendingCache(ttl_s=1.0)
    for i in range(10_000):
        cache.remember(f"k=10&junk={i}".encode(), ("all", "1h", "volume", 10))
    assert len(cache.raw) <= 4096


def test_cached_answer_asks_for_a_refresh_before_it_expires():
    cache = TrendingCache(ttl_s=1.0)
    answer = cache.put(("all", "1h", "volume", 10), None)
    assert answer.expires - answer.refresh_at == pytest.approx(0.25)
