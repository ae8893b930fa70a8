"""Pure pieces of the batch layer: the contract verdict, buckets from data intervals, publish digests."""

from __future__ import annotations

import argparse
import threading
from datetime import datetime, timezone

import orjson
import pytest

from batch import accuracy, archive, parse, publish, status, submit, tasks, transforms
from trendcore import keys
from trendcore.cms import CountMinSketch, SketchShape
from trendcore.errors import InvalidRecord, ServiceError
from trendcore.events import parse_record
from trendcore.settings import Settings, to_env
from trendcore.windows import day_date, parse_day

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
        assert verdict.ok is False and (verdict.field, verdict.reason) == (exc.field, exc.reason)
    else:
        assert verdict.ok is True and verdict.post_id == "p1"
    assert len(verdict) == len(transforms.PARSED.names)


def test_the_verdict_is_the_struct_of_the_spark_udf():
    """The UDF hands Spark the verdict as a plain tuple: its fields must be the struct's, in order."""
    assert parse.Parsed._fields == tuple(transforms.PARSED.names)


def test_the_verdict_carries_an_engagements_event_id():
    value = orjson.dumps({**GOOD, "type": "engagement", "kind": "like", "event_id": "e-7"})
    assert parse.parse_value(value, "engagement", NOW, 300_000).event_id == "e-7"
    assert parse.parse_value(orjson.dumps(GOOD), "post", NOW, 300_000).event_id is None


def test_a_tombstone_is_refused_with_a_reason():
    assert parse.parse_value(None, "post", NOW, 0).reason == "empty value (tombstone)"


def test_post_tags_uses_the_shared_extraction():
    assert parse.post_tags("hi #Café #cafe #news #CAFÉ") == [("café", "Café"), ("cafe", "cafe"), ("news", "news")]
    assert parse.post_tags(None) == []


def test_buckets_come_from_the_data_interval():
    start = datetime(2026, 11, 29, 19, 0, tzinfo=timezone.utc)
    assert tasks.hour_of_interval(start) == NOW // 3_600_000 - 1
    assert day_date(tasks.day_of_interval(start)).isoformat() == "2026-11-29"
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
    assert publish.pattern(keys.exact_hour, "%s", "%d") % ("US", 7) == keys.exact_hour("US", 7)
    assert publish.pattern(keys.baseline, "%s", "%d") % ("all", 30) == keys.baseline("all", 30)


def test_runs_split_a_sorted_key_column_into_its_keys():
    assert publish._runs(["a", "a", "b", "c", "c", "c"]) == [(0, 2), (2, 3), (3, 6)]
    assert publish._runs(["a"]) == [(0, 1)]
    assert publish._runs([]) == []


def test_baselines_are_for_the_24_hours_of_the_next_day():
    monday = 20_731  # 2026-10-05
    assert transforms.next_hours_of_week(monday) == list(range(24, 48))
    assert transforms.baseline_history(monday, monday * 24, 4) == (monday * 24, (monday + 1) * 24, 0)
    assert transforms.baseline_history(monday, 0, 4)[2] == 4
    # the Tuesdays before Tuesday 2026-10-06: the only hourly partitions the same hours of week are in
    assert [d.isoformat() for d in transforms.same_weekdays(monday, 2)] == ["2026-09-29", "2026-09-22"]


def test_accuracy_rows_are_the_speed_accuracy_schema():
    assert accuracy.COLUMNS == tuple(column.split()[0] for column in accuracy.SCHEMA.split(", "))


def test_an_accuracy_row_compares_estimates_with_the_exact_top_tags():
    """One counter: every estimate is the sketch's total, so the errors and ranks are known exactly."""
    sketch = CountMinSketch(SketchShape(width=1, depth=1))
    sketch.add("a", 5)
    sketch.add("b", 3)
    row = accuracy._compared(7, "US", 8, 0.5, sketch, 8, {"a": 5, "b": 3}, [])
    assert row == accuracy.AccuracyRow(
        hour=7, region="US", exact_total=8, speed_total=8, eps=0.5, error_bound=4, tags_checked=2, max_error=5,
        mean_error=4.0, within_bound=0.5, undercounts=0, top10_recall=1.0, top10_source="estimates",
        sketch_present=True,
    )
    with_candidates = accuracy._compared(7, "US", 8, 0.5, sketch, 8, {"a": 5, "b": 3}, [b"a", b"z"])
    assert (with_candidates.top10_source, with_candidates.top10_recall) == ("candidates", 0.5)


def test_a_region_without_a_sketch_has_nothing_compared():
    row = accuracy._missing(7, "DE", 40, 0.001)
    assert (row.hour, row.region, row.exact_total, row.eps, row.tags_checked) == (7, "DE", 40, 0.001, 0)
    assert row.sketch_present is False and row.error_bound is None and row.max_error is None


def test_drift_is_the_newest_compared_hour_per_region():
    rows = [accuracy._compared(10, "US", 8, 0.25, _one_counter(8), 8, {"a": 6}, []),  # error 2, bound 2
            accuracy._compared(11, "US", 8, 0.5, _one_counter(8), 8, {"a": 2}, []),  # error 6, bound 4
            accuracy._missing(12, "US", 8, 0.5), accuracy._missing(11, "DE", 50, 0.5)]
    assert status.drift(rows) == {"US": 1.5}
    assert status.drift([tuple(row) for row in rows]) == {"US": 1.5}  # plain tuples in the row's field order


def test_sketch_health_reports_undercounts_and_missing_sketches_of_kept_hours():
    """Undercounts come from the newest compared hour; a missing sketch counts only while Redis should keep it."""
    hour = 490_000
    now_ms = (hour + 2) * 3_600_000
    rows = [accuracy._compared(hour - 1, "US", 8, 0.5, _one_counter(8), 8, {"a": 9, "b": 2}, []),  # a: 8 < 9
            accuracy._compared(hour, "US", 8, 0.5, _one_counter(8), 8, {"a": 6}, []),
            accuracy._missing(hour, "DE", 50, 0.5),
            accuracy._missing(hour - 100, "FR", 5, 0.5)]  # a backfill past the 26 kept hours
    health = status.sketch_health(rows, now_ms, keep_hours=26)
    assert health == {"US:undercounts": 0, "US:sketch_missing": 0, "DE:sketch_missing": 1}
    older = status.sketch_health(rows[:1], now_ms, keep_hours=26)
    assert older == {"US:undercounts": 1, "US:sketch_missing": 0}


def _one_counter(total: int) -> CountMinSketch:
    sketch = CountMinSketch(SketchShape(width=1, depth=1))
    sketch.add("x", total)
    return sketch


def test_a_view_key_gives_its_meta_key():
    assert publish._meta_key(keys.PLAIN, keys.exact_hour("US", 7)) == keys.exact_meta("US", "h", 7)
    assert publish._meta_key(keys.PLAIN, keys.exact_day("all", 20_731)) == keys.exact_meta("all", "d", 20_731)
    with pytest.raises(ValueError):
        publish._meta_key(keys.PLAIN, keys.baseline("US", 3))


def test_staged_rows_are_the_executors_arrow_schema():
    assert publish.Staged._fields == tuple(publish.STAGED.names)


@pytest.mark.parametrize(("argv", "buckets"), [
    (["archive"], []),
    (["hourly", "--hour", "2026-11-29T19"], [NOW // 3_600_000 - 1]),
    (["daily", "--date", "2026-11-29"], [parse_day("2026-11-29")]),
    (["maintain", "--date", "2026-11-29"], [parse_day("2026-11-29")]),
    (["backfill", "--from", "2026-11-28", "--to", "2026-11-29"], [parse_day("2026-11-28"), parse_day("2026-11-29")]),
])
def test_spark_submit_jobs_take_their_buckets_from_their_options(argv, buckets):
    args = argparse.Namespace(job=argv[0], hour=None, date=None, first=None, last=None)
    names = {"--hour": "hour", "--date": "date", "--from": "first", "--to": "last"}
    for option, value in zip(argv[1::2], argv[2::2], strict=True):
        setattr(args, names[option], value)
    assert submit.job_buckets(args) == buckets


@pytest.mark.parametrize(("argv", "message"), [
    (["hourly", "--hour", "2026-13-01T19"], "argument --hour: '2026-13-01T19' is not a UTC hour"),
    (["hourly", "--hour", "2026-11-29T19:30"], "is not on an hour boundary"),
    (["hourly"], "hourly needs --hour"),
    (["daily", "--date", "29/11/2026"], "argument --date: '29/11/2026' is not a UTC day"),
    (["backfill", "--from", "2026-11-28"], "backfill needs --to"),
])
def test_spark_submit_refuses_a_bad_bucket_before_spark_starts(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        submit.main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["hourly", "--hour", "2026-11-29T25"], "is not a UTC hour"),
    (["daily", "--date", "yesterday"], "'yesterday' is not a UTC day"),
    (["maintain", "--date", "2026-02-30"], "is not a UTC day"),
    (["backfill", "--from", "2026-11-01", "--to", "soon"], "'soon' is not a UTC day"),
])
def test_the_cli_names_the_option_a_bad_bucket_came_in(argv, message):
    from typer.testing import CliRunner

    from batch.cli import app

    result = CliRunner().invoke(app, argv, env={"COLUMNS": "300"})
    assert result.exit_code == 2
    assert f"Invalid value for {argv[-2]}:" in result.output and message in result.output


def test_each_checkpoint_appends_under_an_app_id_of_its_own():
    """The archive's txnAppId carries the query id Spark keeps in the checkpoint: a new checkpoint, whose batch
    ids restart at 0, never reuses the (app id, batch id) pairs of the one it replaces."""
    query_id = "4b53f6fa-88e3-4033-b060-a2b32425180b"
    assert archive.app_id(query_id) == f"trends-archive-{query_id}"
    assert archive.app_id("a") != archive.app_id("b")


def test_a_batch_waits_for_the_query_id_that_start_hands_over():
    query_id = archive.QueryId()
    threading.Timer(0.1, query_id.set, ["q-1"]).start()
    assert query_id.get(timeout_s=10) == "q-1"
    assert query_id.get(timeout_s=0) == "q-1"


def test_a_query_id_that_never_comes_is_a_service_error():
    with pytest.raises(ServiceError, match="query's id was not known"):
        archive.QueryId().get(timeout_s=0.05)
