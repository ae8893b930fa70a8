"""Pure DataFrame -> DataFrame transforms of the batch layer (no I/O): parse, mentions, gold tables."""

from __future__ import annotations

import datetime
import functools
import re

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from batch import day_pass as day_pass_arrow
from batch import parse
from batch import tag_counts as tag_counts_arrow
from trendcore import windows
from trendcore.regions import WORLDWIDE
from trendcore.windows import HOUR_MS, day_date

HOURS_PER_WEEK = 168

PARSED = T.StructType(
    [
        T.StructField("ok", T.BooleanType()),
        T.StructField("type", T.StringType()),
        T.StructField("post_id", T.StringType()),
        T.StructField("user_id", T.StringType()),
        T.StructField("region", T.StringType()),
        T.StructField("text", T.StringType()),
        T.StructField("kind", T.StringType()),
        T.StructField("created_at", T.LongType()),
        T.StructField("field", T.StringType()),
        T.StructField("reason", T.StringType()),
        T.StructField("event_id", T.StringType()),
    ]
)
TAGS = T.ArrayType(T.StructType([T.StructField("tag", T.StringType()), T.StructField("display", T.StringType())]))


def event_date(ms: Column) -> Column:
    """UTC date of an epoch-ms column (the session time zone is UTC)."""
    return F.to_date(F.timestamp_millis(ms))


def hour_of_week(hour: Column) -> Column:
    """`trendcore.windows.hour_of_week` of an hour-bucket column: 0 = Monday 00:00 UTC ... 167 = Sunday 23:00.

    The core function is its oracle (tests compare the two); the offset is the core's hour of week of hour 0.
    """
    return F.pmod(hour + F.lit(windows.hour_of_week(0)), F.lit(HOURS_PER_WEEK)).cast("int")


def parse_kafka(raw: DataFrame, topic_types: dict[str, str], max_future_ms: int) -> DataFrame:
    """Kafka rows -> the same rows plus `p`, the contract's verdict (trendcore.events.parse_record).

    The far-future check uses the Kafka record timestamp as `now`, so a re-run decides the same.
    """
    parse_udf = F.udf(lambda v, t, now: parse.parse_value(v, t, now, max_future_ms), PARSED, useArrow=False)
    expected = F.lit(None).cast("string")
    for topic, kind in topic_types.items():
        expected = F.when(F.col("topic") == topic, F.lit(kind)).otherwise(expected)
    kafka_ms = F.unix_millis(F.col("timestamp"))
    return raw.select(
        "topic", "partition", "offset", "key", "value",
        kafka_ms.alias("kafka_ts"),
        parse_udf(F.col("value"), expected, kafka_ms).alias("p"),
    )


def _bronze(parsed: DataFrame, record_type: str, fields: list[str]) -> DataFrame:
    """Valid records of one type: their fields, event hour, raw record, Kafka coordinates, event date."""
    ok = parsed.where(F.col("p.ok") & (F.col("p.type") == record_type))
    return ok.select(
        *(f"p.{name}" for name in fields), "p.created_at",
        (F.col("p.created_at") / F.lit(HOUR_MS)).cast("long").alias("hour"),
        "topic", "partition", "offset", "kafka_ts", "key", "value",
        event_date(F.col("p.created_at")).alias("date"),
    )


def bronze_posts(parsed: DataFrame) -> DataFrame:
    """Valid posts with their raw record and Kafka coordinates, partitioned by event date."""
    return _bronze(parsed, "post", ["post_id", "user_id", "region", "text"])


def bronze_engagements(parsed: DataFrame) -> DataFrame:
    """Valid engagements (each Kafka record is one, copies of an event_id too), partitioned by event date."""
    return _bronze(parsed, "engagement", ["post_id", "user_id", "kind", "region", "event_id"])


def quarantine(parsed: DataFrame) -> DataFrame:
    """Every refused record, raw, with the field and reason; partitioned by the Kafka date."""
    bad = parsed.where(~F.col("p.ok"))
    return bad.select(
        "topic", "partition", "offset", "kafka_ts", "key", "value",
        F.col("p.field").alias("field"), F.col("p.reason").alias("reason"),
        event_date(F.col("kafka_ts")).alias("date"),
    )


def first_copies(posts: DataFrame) -> DataFrame:
    """One row per post_id: the copy Kafka received first (timestamp, partition, offset)."""
    order = Window.partitionBy("post_id").orderBy("kafka_ts", "partition", "offset")
    return posts.withColumn("_n", F.row_number().over(order)).where("_n = 1").drop("_n")


def silver_posts(posts: DataFrame) -> DataFrame:
    """The silver `posts` columns (no raw bytes)."""
    return posts.select("post_id", "user_id", "region", "text", "created_at", "hour", "date")


def mentions(posts: DataFrame) -> DataFrame:
    """One row per (post, tag) via trendcore.hashtags.tag_keys: a post repeating a tag counts once."""
    tags_udf = F.udf(parse.post_tags, TAGS, useArrow=False)
    exploded = posts.select("*", F.explode(tags_udf(F.col("text"))).alias("t"))
    return exploded.select(
        "post_id", F.col("t.tag").alias("tag"), F.col("t.display").alias("display"),
        "region", "user_id", "created_at", "hour", "date",
    )


def tag_counts(mentions_df: DataFrame, grains: list[str], partitions: int) -> DataFrame:
    """Exact mentions and distinct authors per (tag, region, bucket) for each grain ("hour", "day"), plus `all`.

    The mentions are shuffled once, by tag, and each partition is counted by Arrow's hash group-by
    (`batch.tag_counts`): Spark's own plan for the same numbers is eight two-phase hash aggregations
    over every mention. A partition holds all the mentions of its tags in the Python worker's memory,
    so `partitions` bounds that memory. Each row also carries its rank within its partition's
    (region, grain, bucket), for `top_tag_candidates`."""
    from pyspark.sql.pandas.types import from_arrow_schema

    buckets = {"hour": F.col("hour"), "day": F.expr("hour div 24")}
    by_tag = mentions_df.select("tag", "region", "user_id", *(buckets[g].alias(g) for g in grains))
    count = functools.partial(tag_counts_arrow.count_batches, grains=grains, worldwide=WORLDWIDE)
    return by_tag.repartition(partitions, "tag").mapInArrow(count, from_arrow_schema(tag_counts_arrow.SCHEMA))


def hourly_rows(counts: DataFrame) -> DataFrame:
    """The `tag_counts_hourly` rows of `tag_counts`."""
    hourly = counts.where(F.col("grain") == "hour")
    date = event_date(F.col("bucket") * F.lit(HOUR_MS)).alias("date")
    return hourly.select("tag", "region", F.col("bucket").alias("hour"), "mentions", "distinct_authors", date)


def daily_rows(counts: DataFrame) -> DataFrame:
    """The `tag_counts_daily` rows of `tag_counts`."""
    daily = counts.where(F.col("grain") == "day")
    date = F.date_from_unix_date(F.col("bucket").cast("int")).alias("date")
    return daily.select("tag", "region", F.col("bucket").alias("day"), "mentions", "distinct_authors", date)


def hour_fingerprints(hourly: DataFrame) -> DataFrame:
    """Per hour of `tag_counts_hourly` rows: rows, summed mentions and authors, and an order-free
    fingerprint (XOR of each row's xxhash64), to tell which hours the daily job must write again."""
    row = F.xxhash64("tag", "region", "mentions", "distinct_authors")
    return hourly.groupBy("hour").agg(
        F.count(F.lit(1)).alias("rows"), F.sum("mentions").alias("mentions"),
        F.sum("distinct_authors").alias("authors"), F.bit_xor(row).alias("fingerprint"),
    )


def distinct_engagements(engagements: DataFrame) -> DataFrame:
    """Engagements with the copies of each event_id dropped (the copy Kafka received first stays, when the rows
    carry their Kafka coordinates); engagements without an event_id all count, as do tables from before it."""
    if "event_id" not in engagements.columns:
        return engagements
    order = [c for c in ("kafka_ts", "partition", "offset") if c in engagements.columns] or ["created_at", "post_id"]
    named = engagements.where(F.col("event_id").isNotNull())
    first = named.withColumn("_n", F.row_number().over(Window.partitionBy("event_id").orderBy(*order)))
    return engagements.where(F.col("event_id").isNull()).unionByName(first.where("_n = 1").drop("_n"))


def engagement_scores(engagements: DataFrame, like: float, repost: float, view: float) -> DataFrame:
    """Weighted engagement per post_id: like, repost and view weights from the settings; an event_id counts once."""
    engagements = distinct_engagements(engagements)
    weight = (
        F.when(F.col("kind") == "like", F.lit(like))
        .when(F.col("kind") == "repost", F.lit(repost))
        .when(F.col("kind") == "view", F.lit(view))
        .otherwise(F.lit(0.0))
    )
    return engagements.groupBy("post_id").agg(F.round(F.sum(weight), 6).alias("score"))


def day_pass(mentions_day: DataFrame, scores: DataFrame, n: int, partitions: int) -> DataFrame:
    """Counts of both grains (as `tag_counts`) and the day's top posts (as `top_posts`) in one shuffle by tag.

    The daily job needs both, and both need every mention of a tag in one place: the mentions, with
    their post's score (null without engagement), are shuffled by tag once and each partition is
    counted and ranked in Arrow (`batch.day_pass`). Count rows have grain "hour" or "day" (what
    `hourly_rows`, `daily_rows` and accuracy select); `day_top_posts` selects the others."""
    from pyspark.sql.pandas.types import from_arrow_schema

    grains = ["hour", "day"]
    day = F.expr("hour div 24").alias("day")
    scored = mentions_day.select("post_id", "tag", "region", "user_id", "hour", day).join(
        scores.hint("shuffle_hash"), "post_id", "left"
    )
    run = functools.partial(day_pass_arrow.batches, grains=grains, worldwide=WORLDWIDE, n=n)
    return scored.repartition(partitions, "tag").mapInArrow(run, from_arrow_schema(day_pass_arrow.SCHEMA))


def day_top_posts(passed: DataFrame) -> DataFrame:
    """The `top_posts_daily` rows of `day_pass`."""
    top = passed.where(F.col("grain") == day_pass_arrow.TOP)
    date = F.date_from_unix_date(F.col("bucket").cast("int")).alias("date")
    return top.select("tag", "region", F.col("bucket").alias("day"), "rank", "post_id", "score", date)


def baseline_history(as_of_day: int, first_hour: int, weeks: int) -> tuple[int, int, int]:
    """(start hour, end hour, full weeks) of the baseline window ending with `as_of_day`."""
    end_hour = (as_of_day + 1) * 24
    start_hour = max(end_hour - weeks * HOURS_PER_WEEK, first_hour)
    return start_hour, end_hour, min(weeks, max(1, end_hour - start_hour) // HOURS_PER_WEEK)


def next_hours_of_week(as_of_day: int) -> list[int]:
    """The 24 hours of week of the day after `as_of_day`, the ones its baselines are for."""
    end_hour = (as_of_day + 1) * 24
    return [windows.hour_of_week(h) for h in range(end_hour, end_hour + 24)]


def same_weekdays(as_of_day: int, full_weeks: int) -> list[datetime.date]:
    """The dates, in the `full_weeks` before it, with the weekday of the day after `as_of_day`."""
    return [day_date(as_of_day + 1 - 7 * k) for k in range(1, full_weeks + 1)]


def baselines(
    hourly: DataFrame, daily: DataFrame, as_of_day: int, first_hour: int, weeks: int, min_mentions: int,
    min_expected: float = 0.0,
) -> DataFrame:
    """Expected count per (tag, region, hour of week) for the 24 hours after `as_of_day`.

    With w >= 1 full weeks of history (at most `weeks`): the mean of the same hour of week over
    those w weeks (absent hours count as 0). With less than a week: the trailing hourly mean over
    the history there is, the same for every hour. Tags under `min_mentions` in the window, and
    expectations under `min_expected`, get none (readers take a missing baseline as 0).

    The window's totals come from the day totals (`daily`: the window is whole days, or starts at
    the first hour of data), the hours of week from the hourly rows of the same weekday only (their
    `date` partitions): 4 weeks of history read 4 days of hourly rows, not 28.
    """
    start_hour, end_hour, full_weeks = baseline_history(as_of_day, first_hour, weeks)
    history_hours = max(1, end_hour - start_hour)
    in_window = (F.col("day") >= start_hour // 24) & (F.col("day") <= as_of_day)
    totals = daily.where(in_window).groupBy("tag", "region").agg(F.sum("mentions").alias("_total"))
    as_of = F.lit(day_date(as_of_day)).alias("as_of")
    next_hows = next_hours_of_week(as_of_day)
    if full_weeks >= 1:
        keep = totals.where(F.col("_total") >= min_mentions)
        # the hours of those dates are exactly the window's hours with the next day's hours of week
        recent = hourly.where(F.col("date").isin(same_weekdays(as_of_day, full_weeks)))
        recent = recent.withColumn("how", hour_of_week(F.col("hour")))
        expected = (
            recent.groupBy("tag", "region", "how")
            .agg((F.sum("mentions") / F.lit(full_weeks)).alias("expected"))
            .join(keep.select("tag", "region"), ["tag", "region"])
        )
        method, basis = "same_hour_of_week", full_weeks * 7 * 24
    else:
        mean = F.col("_total") / F.lit(history_hours)
        keep = totals.where((F.col("_total") >= min_mentions) & (mean >= min_expected))
        hows = hourly.sparkSession.createDataFrame([(h,) for h in next_hows], "how int")
        expected = keep.select("tag", "region", mean.alias("expected")).crossJoin(F.broadcast(hows))
        method, basis = "trailing_hourly_mean", history_hours
    expected = expected.where(F.col("expected") >= min_expected)
    return expected.select(
        "tag", "region", F.col("how").cast("int").alias("hour_of_week"),
        F.round("expected", 6).alias("expected"),
        F.lit(method).alias("method"), F.lit(basis).cast("int").alias("history_hours"), as_of,
    )


def top_tag_candidates(counts: DataFrame, n: int) -> DataFrame:
    """The hour rows of `tag_counts` that may be in the top n of their (hour, region): those ranked n
    or better in their count partition (a tag's rank there is never worse than its global rank)."""
    hourly = counts.where((F.col("grain") == "hour") & (F.col("partition_rank") <= n))
    return hourly.select(F.col("bucket").alias("hour"), "region", "tag", "mentions")


def top_tags(hourly: DataFrame, n: int) -> DataFrame:
    """The n most mentioned tags per (hour, region), ties by tag: what accuracy checks against the sketch."""
    order = Window.partitionBy("hour", "region").orderBy(F.desc("mentions"), F.asc("tag"))
    ranked = hourly.select("hour", "region", "tag", "mentions").withColumn("_rank", F.row_number().over(order))
    return ranked.where(F.col("_rank") <= n).drop("_rank")


def hour_totals(counts: DataFrame) -> DataFrame:
    """Exact mentions per (hour, region) from the hour rows of `tag_counts`: the N of the accuracy comparison."""
    hourly = counts.where(F.col("grain") == "hour")
    return hourly.groupBy(F.col("bucket").alias("hour"), "region").agg(F.sum("mentions").alias("total"))


def key_column(pattern: str, columns: list[str]) -> Column:
    """`pattern` (printf, only %s and %d) filled with `columns`, built with concat: Spark's format_string
    would run Java's Formatter for every row, where concat only copies the parts."""
    texts = re.split(r"%[sd]", pattern)
    if len(texts) != len(columns) + 1:
        raise ValueError(f"pattern {pattern!r} does not take {len(columns)} values")
    parts = [F.lit(texts[0])]
    for column, text in zip(columns, texts[1:], strict=True):
        parts += [F.col(column).cast("string"), F.lit(text)]
    return F.concat(*parts)


def view_rows(df: DataFrame, pattern: str, key_columns: list[str], field: str, value: str) -> DataFrame:
    """(key, field, value) rows for publishing: key = `pattern` (printf) filled with `key_columns`."""
    key = key_column(pattern, key_columns)
    return df.select(key.alias("key"), F.col(field).alias("field"), F.col(value).alias("value"))


def view_fingerprints(views: DataFrame) -> DataFrame:
    """Per view key: rows, total and an order-free fingerprint of its (field, value) pairs (XOR of
    their xxhash64), to tell which published views changed without sorting or staging them."""
    return views.groupBy("key").agg(
        F.count(F.lit(1)).alias("rows"), F.sum("value").alias("total"),
        F.bit_xor(F.xxhash64("field", "value")).alias("fingerprint"),
    )
