"""Pure pieces of the batch layer: the contract verdict, buckets from data intervals, publish digests."""

from __future__ import annotations

from datetime import datetime, timezone

import orjson
import pytest

from batch import parse, publish, tasks
from batch.jobs import day_date, parse_day
from trendcore.settings import to_env
from trendcore.errors import InvalidRecord
from trendcore.events import parse_record
from trendcore.settings import Settings

NOW = 1_795_982_400_000  # 2026-11-29T20:00:00Z
GOOD = {"v": 1, "type": "post", "post_id": "p1", "user_id": "u1", "region": "US",
        "text": "hi #Café #cafe #news", "created_at": "2026-11-29T19:59:00.000Z"}


@pytest.mark.parametrize(
    "value",
    [
        orjson.dumps(GOOD),
        orjson.dumps({**GOOD, "region": "Atlantis"}),
        orjson.dumps({**GOOD, "created_at": "2026-12-01T00:00:00Z"}),
        orjson.dumps(GOOD)[:-3],
        orjson.dumps(GOOD).replace(b"hi", b"h\xff"),
        orjson.dumps({**GOOD, "type": "engagement", "kind": "like"}),
    ],
)
def test_parse_value_accepts_and_refuses_exactly_what_parse_record_does(value):
    verdict = parse.parse_value(value, "post", NOW, 300_000)
    try:
        parse_record(value, "post", NOW)
    except InvalidRecord as exc:
        assert verdict[0] is False and (verdict[-2], verdict[-1]) == (exc.field, exc.reason)
    else:
        assert verdict[0] is True and verdict[2] == "p1"
    assert len(verdict) == len(parse.PARSED_FIELDS)


def test_a_tombstone_is_refused_with_a_reason():
    assert parse.parse_value(None, "post", NOW, 0)[-1] == "empty value (tombstone)"


def test_post_tags_uses_the_shared_extraction():
    assert parse.post_tags("hi #Café #cafe #news #CAFÉ") == [("café", "Café"), ("cafe", "cafe"), ("news", "news")]
    assert parse.post_tags(None) == []


def test_buckets_come_from_the_data_interval():
    start = datetime(2026, 11, 29, 19, 0, tzinfo=timezone.utc)
    assert tasks.hour_of_interval(start) == NOW // 3_600_000 - 1
    assert day_date(tasks.day_of_interval(start)) == "2026-11-29"
    assert parse_day("2026-11-29") == tasks.day_of_interval(start)
    assert tasks.stamp("hourly_exact", "scheduled__x", 2) == "hourly_exact/scheduled__x/try2"


def test_digest_depends_on_content_not_order():
    a = publish.digest({"x": 1, "y": 2})
    assert a == publish.digest({"y": 2, "x": 1})
    assert a != publish.digest({"x": 1, "y": 3})
    assert publish._fmt(3.0) == "3" and publish._fmt(0.1 + 0.2) == "0.3"


def test_group_nests_rows_by_their_leading_columns():
    rows = [("US", "a", 1), ("US", "b", 2), ("all", "a", 3)]
    assert publish.group(rows) == {"US": {"a": 1, "b": 2}, "all": {"a": 3}}
    assert publish.group([("US", 5, "a", 1.5)], width=2) == {("US", 5): {"a": 1.5}}


def test_settings_survive_the_trip_through_environment_variables(monkeypatch):
    custom = Settings(kafka={"bootstrap": "k:1", "posts_topic": "p2"}, batch={"top_posts": 7},
                      airflow={"catchup": True})
    for key, value in to_env(custom).items():
        monkeypatch.setenv(key, value)
    assert Settings() == custom


def test_key_patterns_follow_the_key_layout():
    from trendcore import keys

    assert publish.pattern(keys.exact_hour, "%s", "%d") % ("US", 7) == keys.exact_hour("US", 7)
    assert publish.pattern(keys.baseline, "%s", "%d") % ("all", 30) == keys.baseline("all", 30)


def test_runs_split_a_sorted_key_column_into_its_keys():
    assert publish._runs(["a", "a", "b", "c", "c", "c"]) == [(0, 2), (2, 3), (3, 6)]
    assert publish._runs(["a"]) == [(0, 1)]
    assert publish._runs([]) == []


def test_baselines_are_for_the_24_hours_of_the_next_day():
    from batch import transforms

    monday = 20_731  # 2026-10-05
    assert transforms.next_hours_of_week(monday) == list(range(24, 48))
    assert transforms.baseline_history(monday, monday * 24, 4) == (monday * 24, (monday + 1) * 24, 0)
    assert transforms.baseline_history(monday, 0, 4)[2] == 4
    # the Tuesdays before Tuesday 2026-10-06: the only hourly partitions the same hours of week are in
    assert [d.isoformat() for d in transforms.same_weekdays(monday, 2)] == ["2026-09-29", "2026-09-22"]
