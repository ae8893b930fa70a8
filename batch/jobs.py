"""The batch jobs as plain functions of (spark, settings, bucket, run_id): hourly, daily, maintenance, backfill.

Each job reads silver `mentions` for its hour or day, replaces its gold partitions (replaceWhere,
so re-running gives the same tables), then publishes to Redis with an atomic swap per key.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timezone

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from batch import accuracy, delta, publish, status, tables, transforms
from batch.tables import Lake
from trendcore.errors import ServiceError
from trendcore.settings import Settings

MENTIONS_SCHEMA = (
    "post_id string, tag string, display string, region string, user_id string, created_at long, hour long, date date"
)
ENGAGEMENTS_SCHEMA = "post_id string, user_id string, kind string, region string, created_at long, hour long, date date"


@dataclass
class JobResult:
    """What a job did: gold rows per table and Redis keys published."""

    job: str
    bucket: int
    rows: dict[str, int] = field(default_factory=dict)
    published: int = 0
    seconds: float = 0.0


def day_date(day: int) -> str:
    """A UTC day index as YYYY-MM-DD."""
    return datetime.fromtimestamp(day * 86_400, tz=timezone.utc).date().isoformat()


def parse_day(text: str) -> int:
    """YYYY-MM-DD as a UTC day index (days since 1970-01-01)."""
    return (date.fromisoformat(text.strip()) - date(1970, 1, 1)).days


def _table_or_empty(spark: SparkSession, lake: Lake, table: str, schema: str) -> DataFrame:
    if delta.exists(spark, lake, table):
        return delta.read(spark, lake, table)
    return spark.createDataFrame([], schema)


def _fail_once(settings: Settings, job: str) -> None:
    """Fault injection for retry drills: fail once, after the tables and before publishing."""
    marker = settings.batch.fail_once_marker
    if marker is not None and not marker.exists():
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(job)
        raise ServiceError(f"{job}: injected failure (fail_once_marker {marker})")


def _views(rows: list) -> dict[int, dict[str, dict[str, int]]]:
    """Gold hourly rows -> hour -> region -> tag -> mentions."""
    views: dict[int, dict[str, dict[str, int]]] = {}
    for row in rows:
        views.setdefault(row["hour"], {}).setdefault(row["region"], {})[row["tag"]] = row["mentions"]
    return views


def _accuracy(spark: SparkSession, settings: Settings, lake: Lake, views: dict, where: str) -> int:
    """Compare each hour's sketches with its exact top tags; replace `speed_accuracy` rows."""
    limit = settings.batch.accuracy_tags
    rows = []
    for hour in sorted(views):
        top = {r: dict(sorted(tags.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]) for r, tags in views[hour].items()}
        totals = {r: sum(tags.values()) for r, tags in views[hour].items()}
        rows += accuracy.compare(settings, hour, top, totals)
    status.record_drift(settings, rows)
    df = spark.createDataFrame(rows, accuracy.SCHEMA).withColumn(
        "date", transforms.event_date(F.col("hour") * F.lit(3_600_000))
    )
    delta.replace(df, lake, tables.ACCURACY, where)
    return len(rows)


def _write_and_collect(df: DataFrame, lake: Lake, table: str, where: str, columns: list[str]) -> list:
    """Replace the partition with `df` and return its rows (computed once)."""
    df = df.persist()
    try:
        delta.replace(df, lake, table, where)
        return df.select(*columns).collect()
    finally:
        df.unpersist()


def hourly(spark: SparkSession, settings: Settings, hour: int, run_id: str, publish_views: bool = True) -> JobResult:
    """Exact counts of one closed hour: gold `tag_counts_hourly`, `speed_accuracy`, then Redis."""
    started = time.monotonic()
    lake = Lake.of(settings)
    result = JobResult("hourly", hour)
    when = f"date = '{day_date(hour // 24)}' AND hour = {hour}"
    source = _table_or_empty(spark, lake, tables.MENTIONS, MENTIONS_SCHEMA).where(when)
    rows = _write_and_collect(transforms.hourly_counts(source), lake, tables.HOURLY, when, ["hour", "region", "tag", "mentions"])
    views = _views(rows)
    result.rows[tables.HOURLY] = len(rows)
    result.rows[tables.ACCURACY] = _accuracy(spark, settings, lake, views, when)
    _fail_once(settings, f"hourly {hour}")
    if publish_views:
        result.published = publish.exact_counts(settings, "h", hour, views.get(hour, {}), run_id)
    result.seconds = time.monotonic() - started
    return result


def daily(spark: SparkSession, settings: Settings, day: int, run_id: str, publish_views: bool = True) -> JobResult:
    """A whole UTC day: its 24 hours again (late data), daily counts, top posts, baselines, accuracy; then Redis."""
    started = time.monotonic()
    lake, cfg = Lake.of(settings), settings.batch
    result = JobResult("daily", day)
    when = f"date = '{day_date(day)}'"
    source = _table_or_empty(spark, lake, tables.MENTIONS, MENTIONS_SCHEMA).where(when).persist()
    try:
        hour_rows = _write_and_collect(
            transforms.hourly_counts(source), lake, tables.HOURLY, when, ["hour", "region", "tag", "mentions"]
        )
        day_rows = _write_and_collect(transforms.daily_counts(source), lake, tables.DAILY, when, ["region", "tag", "mentions"])
        engagements = _table_or_empty(spark, lake, tables.BRONZE_ENGAGEMENTS, ENGAGEMENTS_SCHEMA).where(when)
        speed = settings.speed  # the speed layer's weights: both layers rank top posts alike
        scores = transforms.engagement_scores(engagements, speed.weight_like, speed.weight_repost, speed.weight_view)
        top_rows = _write_and_collect(
            transforms.top_posts(source, scores, cfg.top_posts), lake, tables.TOP_POSTS, when,
            ["region", "tag", "post_id", "score"],
        )
    finally:
        source.unpersist()
    history = delta.read(spark, lake, tables.HOURLY)
    first_hour = history.agg(F.min("hour")).collect()[0][0]
    base_rows: list = []
    if first_hour is not None:
        base = transforms.baselines(history, day, first_hour, cfg.baseline_weeks, cfg.baseline_min_mentions)
        base_rows = _write_and_collect(
            base, lake, tables.BASELINES, f"as_of = '{day_date(day)}'", ["region", "hour_of_week", "tag", "expected"]
        )
    views = _views(hour_rows)
    result.rows = {tables.HOURLY: len(hour_rows), tables.DAILY: len(day_rows), tables.TOP_POSTS: len(top_rows),
                   tables.BASELINES: len(base_rows)}
    result.rows[tables.ACCURACY] = _accuracy(spark, settings, lake, views, when)
    _fail_once(settings, f"daily {day}")
    if publish_views:
        first, last = transforms.day_bounds(day)
        for hour in range(first, last):
            result.published += publish.exact_counts(settings, "h", hour, views.get(hour, {}), run_id)
        result.published += publish.exact_counts(settings, "d", day, publish.group(day_rows), run_id)
        top = publish.group((r["tag"], r["post_id"], r["score"]) for r in top_rows if r["region"] == "all")
        result.published += publish.top_posts(settings, day, top, run_id)
        result.published += publish.baselines(settings, publish.group(base_rows, width=2), run_id)
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
