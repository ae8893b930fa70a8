"""The JVM class archive of the batch jobs (Java's class data sharing, CDS).

Every job is a new process whose JVM loads and verifies thousands of Spark and Hadoop classes from
jars before its first row, a large part of a short job (classes of the JVM's class path are
archived; Delta's, loaded through `spark.jars`, are not). `record` runs the jobs' code paths
once on a few rows in a child process whose JVM writes the classes it loaded to an archive at exit;
later sessions map that archive (`adapters.spark.driver_java_options`). docs/batch.md has the figures.

    python -m batch.class_archive <archive>     # the child: exercise the jobs, let the JVM write <archive>
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trendcore.errors import ServiceError
from trendcore.settings import Settings

HOUR = 20_731 * 24 + 12  # an hour of 2026-10-05: any closed hour does
ROWS = 400


def _silver(spark, hour: int):
    """(mentions, engagements): a few hundred rows of `hour` in the silver schemas."""
    from pyspark.sql import functions as F

    def pick(*values: str):
        return F.element_at(F.array(*map(F.lit, values)), (F.col("id") % len(values) + 1).cast("int"))

    rows = spark.range(ROWS).select(
        F.concat(F.lit("p"), (F.col("id") % 150).cast("string")).alias("post_id"),
        F.concat(F.lit("tag"), (F.col("id") % 37).cast("string")).alias("tag"),
        F.concat(F.lit("Tag"), (F.col("id") % 37).cast("string")).alias("display"),
        pick("US", "DE", "JP").alias("region"),
        F.concat(F.lit("u"), (F.col("id") % 90).cast("string")).alias("user_id"),
        pick("like", "view", "repost").alias("kind"),
        (F.lit(hour * 3_600_000) + F.col("id")).alias("created_at"),
        F.lit(hour).cast("long").alias("hour"),
    ).withColumn("date", F.to_date(F.timestamp_millis("created_at")))
    mentions = rows.select("post_id", "tag", "display", "region", "user_id", "created_at", "hour", "date")
    return mentions, rows.select("post_id", "user_id", "kind", "region", "created_at", "hour", "date")


def exercise(spark, lake_root: Path) -> None:
    """The jobs' Spark work on a few rows in a scratch lake: Delta writes, reads and replaceWhere, the
    Arrow passes (counts, top posts), a window, persist, fingerprints, collect, OPTIMIZE."""
    from pyspark.sql import functions as F

    from batch import delta, publish, tables, transforms
    from batch.tables import Lake
    from trendcore import keys
    from trendcore.windows import day_date

    lake = Lake(str(lake_root))
    mentions, engagements = _silver(spark, HOUR)
    mentions.write.format("delta").mode("overwrite").partitionBy("date").save(lake.path(tables.MENTIONS))
    engagements.write.format("delta").mode("overwrite").partitionBy("date").save(lake.path(tables.BRONZE_ENGAGEMENTS))
    when = f"date = '{day_date(HOUR // 24)}'"
    for _ in range(2):  # the second round takes the replaceWhere path of an existing table
        source = delta.read(spark, lake, tables.MENTIONS, pinned=True).where(when)
        counts = transforms.tag_counts(source, ["hour", "day"], 2).persist()
        hours = transforms.hourly_rows(counts)
        delta.replace(hours, lake, tables.HOURLY, when)
        delta.replace(transforms.daily_rows(counts), lake, tables.DAILY, when)
        transforms.top_tags(transforms.top_tag_candidates(counts, 5), 5).collect()
        transforms.hour_totals(counts).collect()
        views = transforms.view_rows(hours, publish.pattern(keys.exact_hour, "%s", "%d"), ["region", "hour"], "tag",
                                     "mentions")
        transforms.view_fingerprints(views).collect()
        engagements = delta.read(spark, lake, tables.BRONZE_ENGAGEMENTS).where(when)
        scores = transforms.engagement_scores(engagements, 1.0, 3.0, 0.1)
        passed = transforms.day_pass(source, scores, 3, 2).persist()
        transforms.hour_fingerprints(transforms.hourly_rows(passed)).collect()
        delta.replace(transforms.day_top_posts(passed), lake, tables.TOP_POSTS, when)
        passed.unpersist()
        delta.read(spark, lake, tables.HOURLY).agg(F.min("hour")).collect()
        counts.unpersist()
    spark.createDataFrame([(HOUR, "US", 1.0)], "hour long, region string, error double").collect()
    delta.optimize(spark, lake, tables.HOURLY, when)


def record(settings: Settings, target: Path) -> float:
    """Write the archive for this JDK and these jars to `target` (a child process exercises the jobs;
    its JVM writes the archive at exit); returns the seconds it took."""
    started = time.monotonic()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    done = subprocess.run([sys.executable, "-m", "batch.class_archive", str(partial)], capture_output=True, text=True)
    if done.returncode or not partial.exists():
        partial.unlink(missing_ok=True)
        raise ServiceError(f"recording the JVM class archive failed (exit {done.returncode}): {done.stderr[-2000:]}")
    partial.replace(target)  # atomic: a session never maps a half-written archive
    for stale in target.parent.glob("spark-*.jsa"):  # made for another JDK or jar set
        if stale != target:
            stale.unlink(missing_ok=True)
    return time.monotonic() - started


def main(partial: str) -> None:
    """The child: a session whose JVM records its classes into `partial`, the jobs exercised, then exit."""
    from adapters.spark import spark_session, stop_jvm

    spark = spark_session(Settings(), "trends-class-archive", record_classes_to=Path(partial))
    with tempfile.TemporaryDirectory(prefix="trends-class-archive-") as scratch:
        exercise(spark, Path(scratch))
    stop_jvm(spark)  # the JVM writes the archive as it exits


if __name__ == "__main__":
    main(sys.argv[1])
