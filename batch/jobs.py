"""The batch jobs as plain functions of (spark, settings, bucket, run_id): hourly, daily, maintenance, backfill.

Each job reads silver `mentions` for its hour or day, replaces its gold partitions (replaceWhere,
so re-running gives the same tables), then publishes to Redis with an atomic swap per key.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NamedTuple

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from batch import accuracy, delta, publish, status, tables, transforms
from batch.tables import Lake
from trendcore.keys import KeySpace
from trendcore.regions import WORLDWIDE
from trendcore.settings import Settings
from trendcore.windows import HOUR_MS, day_date

MENTIONS_SCHEMA = (
    "post_id string, tag string, display string, region string, user_id string, created_at long, hour long, date date"
)
ENGAGEMENTS_SCHEMA = (
    "post_id string, user_id string, kind string, region string, event_id string, created_at long, hour long, "
    "date date"
)


@dataclass
class JobResult:
    """What a job did: gold rows per table, Redis keys published, and where its seconds went."""

    job: str
    bucket: int
    rows: dict[str, int] = field(default_factory=dict)
    published: int = 0
    unchanged: int = 0  # exact views Redis already held with the same content (not written again)
    rewritten_hours: list[int] = field(default_factory=list)  # daily: hours whose table rows changed (late data)
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)


@contextmanager
def _phase(result: JobResult, name: str) -> Iterator[None]:
    """Add the wall time of the block to result.phases[name] (the benchmark's breakdown)."""
    started = time.monotonic()
    try:
        yield
    finally:
        result.phases[name] = round(result.phases.get(name, 0.0) + time.monotonic() - started, 2)


def _table_or_empty(spark: SparkSession, lake: Lake, table: str, schema: str | T.StructType,
                    pinned: bool = False) -> DataFrame:
    """The table, or an empty frame of `schema` when it was never written (a fresh lake)."""
    if delta.exists(spark, lake, table):
        return delta.read(spark, lake, table, pinned)
    return spark.createDataFrame([], schema)


def _accuracy(spark: SparkSession, settings: Settings, lake: Lake, counts: DataFrame, where: str) -> int:
    """Compare each hour's sketches with its exact top tags (top-N and totals computed in Spark from
    `tag_counts`, the top-N among the rows ranked well enough in their partition); replace `speed_accuracy`."""
    n = settings.batch.accuracy_tags
    top: dict[int, dict[str, dict[str, int]]] = {}
    for r in transforms.top_tags(transforms.top_tag_candidates(counts, n), n).collect():
        top.setdefault(r["hour"], {}).setdefault(r["region"], {})[r["tag"]] = r["mentions"]
    totals: dict[int, dict[str, int]] = {}
    for r in transforms.hour_totals(counts).collect():
        totals.setdefault(r["hour"], {})[r["region"]] = r["total"]
    rows: list[accuracy.AccuracyRow] = []
    for hour in sorted(top):
        rows += accuracy.compare(settings, hour, top[hour], totals[hour])
    status.record_drift(settings, rows)
    df = spark.createDataFrame(rows, accuracy.SCHEMA).withColumn(
        "date", transforms.event_date(F.col("hour") * F.lit(HOUR_MS))
    )
    delta.replace(df, lake, tables.ACCURACY, where)
    return len(rows)


def _written(df: DataFrame, lake: Lake, table: str, where: str, result: JobResult, kept: list[DataFrame],
             persist: bool = True) -> DataFrame:
    """Replace the partition with `df`, computed once and kept (persisted) for publishing; counts its rows.

    `persist=False` for a cheap selection of a frame that is kept already (cached twice it would
    only take memory)."""
    if persist:
        df = df.persist()
        kept.append(df)
    delta.replace(df, lake, table, where)
    result.rows[table] = df.count()
    return df


class HourPrint(NamedTuple):
    """What tells an hour's `tag_counts_hourly` rows apart (`transforms.hour_fingerprints`)."""

    rows: int
    mentions: int
    authors: int
    fingerprint: int


def _hour_prints(hourly: DataFrame) -> dict[int, HourPrint]:
    """hour -> HourPrint of `tag_counts_hourly` rows."""
    return {r["hour"]: HourPrint(r["rows"], r["mentions"], r["authors"], r["fingerprint"])
            for r in transforms.hour_fingerprints(hourly).collect()}


def _table_hours(spark: SparkSession, lake: Lake, where: str) -> dict[int, HourPrint]:
    """hour -> HourPrint of the `tag_counts_hourly` rows matching `where`."""
    if not delta.exists(spark, lake, tables.HOURLY):
        return {}
    return _hour_prints(delta.read(spark, lake, tables.HOURLY).where(where))


def _write_changed_hours(spark: SparkSession, hours: DataFrame, lake: Lake, when: str, result: JobResult) -> None:
    """Replace only the day's hours whose rows differ from the table's: the hourly jobs wrote the others
    already, and late data changes a few. Same table contents as rewriting the day, without writing
    millions of equal rows again (a fingerprint per hour, read from the table, decides).
    `when`: the day's partition."""
    new = _hour_prints(hours)
    old = _table_hours(spark, lake, when)
    changed = sorted(h for h in new.keys() | old.keys() if new.get(h) != old.get(h))
    result.rows[tables.HOURLY] = sum(p.rows for p in new.values())
    result.rewritten_hours = changed
    if not changed:
        return
    if len(changed) < len(new.keys() | old.keys()):
        hours, when = hours.where(F.col("hour").isin(changed)), f"{when} AND hour IN ({', '.join(map(str, changed))})"
    delta.replace(hours, lake, tables.HOURLY, when)


def _publish_counts(settings: Settings, views: DataFrame, run_id: str, result: JobResult) -> int:
    """Exact count views (key, field, value) whose content Redis does not hold yet: staged by the
    executors, swapped by the driver, then their metas. Unchanged views keep their earlier run's
    stamp; the daily job thereby republishes only the hours that late data changed."""
    prints = {r["key"]: publish.ViewPrint(r["rows"], r["total"], r["fingerprint"])
              for r in transforms.view_fingerprints(views).collect()}
    same = publish.unchanged_views(settings, prints)
    result.unchanged += len(same)
    changed = sorted(set(prints) - same)
    if not changed:
        return 0
    ttl_s = settings.batch.publish_ttl_s
    staged = publish.stage_frame(views.where(F.col("key").isin(changed)), settings, run_id, ttl_s)
    publish.swap(settings, run_id, [s.key for s in staged])
    return len(staged) + publish.exact_metas(settings, run_id, staged, prints)


def _views(df: DataFrame, key_of: Callable[..., str], key_columns: list[str], field_column: str,
           value_column: str) -> DataFrame:
    """(key, field, value) rows of `df`, keyed by `key_of` (a KeySpace builder of a text and an int column)."""
    return transforms.view_rows(df, publish.pattern(key_of, "%s", "%d"), key_columns, field_column, value_column)


def _hour_views(counts: DataFrame, keys: KeySpace) -> DataFrame:
    return _views(counts, keys.exact_hour, ["region", "hour"], "tag", "mentions")


def hourly(spark: SparkSession, settings: Settings, hour: int, run_id: str, publish_views: bool = True) -> JobResult:
    """Exact counts of one closed hour: gold `tag_counts_hourly`, `speed_accuracy`, then Redis."""
    started = time.monotonic()
    lake = Lake.of(settings)
    result, kept = JobResult("hourly", hour), []
    when = f"date = '{day_date(hour // 24)}' AND hour = {hour}"
    try:
        source = _table_or_empty(spark, lake, tables.MENTIONS, MENTIONS_SCHEMA).where(when)
        with _phase(result, "counts+delta"):  # kept: the table, accuracy and the views are selections of it
            counts = transforms.tag_counts(source, ["hour"], settings.spark.shuffle_partitions).persist()
            kept.append(counts)
            hours = _written(transforms.hourly_rows(counts), lake, tables.HOURLY, when, result, kept, persist=False)
        with _phase(result, "accuracy"):
            result.rows[tables.ACCURACY] = _accuracy(spark, settings, lake, counts, when)
        if publish_views:
            with _phase(result, "publish"):
                views = _hour_views(hours, KeySpace.of(settings))
                result.published = _publish_counts(settings, views, run_id, result)
    finally:
        for df in kept:
            df.unpersist()
    result.seconds = time.monotonic() - started
    return result


def _publish_baselines(settings: Settings, base: DataFrame, day: int, trailing: bool, run_id: str) -> int:
    """Baseline hashes; a trailing mean (the same for all 24 hours) is staged once per region and COPYed
    server-side to the other hours of week."""
    hows, keys = transforms.next_hours_of_week(day), KeySpace.of(settings)
    if trailing:
        base = base.where(F.col("hour_of_week") == hows[0])
    rows = _views(base, keys.baseline, ["region", "hour_of_week"], "tag", "expected")
    staged = [s.key for s in publish.stage_frame(rows, settings, run_id, settings.batch.baseline_ttl_s)]
    copies = {}
    if trailing:
        for key in staged:
            region, _ = keys.parse_baseline(key)
            copies[key] = [keys.baseline(region, h) for h in hows[1:]]
    publish.swap(settings, run_id, staged, copies)
    return len(staged) + sum(len(c) for c in copies.values())


def _publish_day(settings: Settings, day: int, hours: DataFrame, days: DataFrame, top: DataFrame, base: DataFrame,
                 trailing: bool, run_id: str, result: JobResult) -> int:
    """The day's exact hour and day counts, worldwide top posts and baselines; returns keys written."""
    published, keys = 0, KeySpace.of(settings)
    with _phase(result, "publish counts"):
        day_views = _views(days, keys.exact_day, ["region", "day"], "tag", "mentions")
        published += _publish_counts(settings, _hour_views(hours, keys).unionByName(day_views), run_id, result)
    with _phase(result, "publish top posts"):
        worldwide = top.where(F.col("region") == WORLDWIDE)
        top_views = _views(worldwide, keys.exact_top_posts, ["tag", "day"], "post_id", "score")
        staged = publish.stage_frame(top_views, settings, run_id, settings.batch.publish_ttl_s, zset=True)
        publish.swap(settings, run_id, [s.key for s in staged])
        published += len(staged)
    with _phase(result, "publish baselines"):
        published += _publish_baselines(settings, base, day, trailing, run_id)
    return published


def daily(spark: SparkSession, settings: Settings, day: int, run_id: str, publish_views: bool = True) -> JobResult:
    """A whole UTC day: its 24 hours again (late data), daily counts, top posts, baselines, accuracy; then Redis."""
    started = time.monotonic()
    lake, cfg = Lake.of(settings), settings.batch
    result, kept = JobResult("daily", day), []
    when = f"date = '{day_date(day)}'"
    try:
        # pinned: every query of the pass (persisted, but recomputed if evicted) sees the same mentions
        source = _table_or_empty(spark, lake, tables.MENTIONS, MENTIONS_SCHEMA, pinned=True).where(when)
        with _phase(result, "day pass+hourly delta"):  # counts of both grains and top posts in one pass, kept
            engagements = _table_or_empty(spark, lake, tables.BRONZE_ENGAGEMENTS, ENGAGEMENTS_SCHEMA).where(when)
            speed = settings.speed  # the speed layer's weights: both layers rank top posts alike
            scores = transforms.engagement_scores(engagements, speed.weight_like, speed.weight_repost,
                                                  speed.weight_view)
            counts = transforms.day_pass(source, scores, cfg.top_posts, settings.spark.shuffle_partitions).persist()
            kept.append(counts)
            hours = transforms.hourly_rows(counts)
            _write_changed_hours(spark, hours, lake, when, result)
        with _phase(result, "daily+delta"):
            days = _written(transforms.daily_rows(counts), lake, tables.DAILY, when, result, kept, persist=False)
        with _phase(result, "top_posts+delta"):
            top = _written(transforms.day_top_posts(counts), lake, tables.TOP_POSTS, when, result, kept, persist=False)
        with _phase(result, "baselines+delta"):
            history = _table_or_empty(spark, lake, tables.HOURLY, hours.schema)  # none: a day with no mentions
            first_hour = history.agg(F.min("hour")).collect()[0][0]
            _, _, full_weeks = transforms.baseline_history(day, first_hour or 0, cfg.baseline_weeks)
            day_totals = delta.read(spark, lake, tables.DAILY)  # today's rows are written above
            base = transforms.baselines(history, day_totals, day, first_hour or 0, cfg.baseline_weeks,
                                        cfg.baseline_min_mentions, cfg.baseline_min_expected)
            base = _written(base, lake, tables.BASELINES, f"as_of = '{day_date(day)}'", result, kept)
        with _phase(result, "accuracy"):
            result.rows[tables.ACCURACY] = _accuracy(spark, settings, lake, counts, when)
        if publish_views:
            result.published = _publish_day(settings, day, hours, days, top, base, full_weeks < 1, run_id, result)
    finally:
        for df in kept:
            df.unpersist()
    result.seconds = time.monotonic() - started
    return result


def maintain(spark: SparkSession, settings: Settings, day: int) -> dict[str, dict]:
    """OPTIMIZE the day's partition of every table, then (batch.vacuum) VACUUM within retention."""
    lake = Lake.of(settings)
    report: dict[str, dict] = {}
    for table, columns in tables.PARTITIONS.items():
        if not delta.exists(spark, lake, table):
            continue
        where = f"{columns[0]} = '{day_date(day)}'"
        report[table] = delta.optimize(spark, lake, table, where)
        if settings.batch.vacuum:
            delta.vacuum(spark, lake, table, settings.batch.vacuum_retain_hours)
    return report


def backfill(
    spark: SparkSession, settings: Settings, first_day: int, last_day: int, run_id: str,
    on_day: Callable[[int, JobResult], None] | None = None,
) -> list[JobResult]:
    """Run the daily job for every day from first_day to last_day inclusive, oldest first."""
    results = []
    for day in range(first_day, last_day + 1):
        result = daily(spark, settings, day, f"{run_id}:{day_date(day)}")
        results.append(result)
        if on_day:
            on_day(day, result)
    return results
