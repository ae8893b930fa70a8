"""Batch benchmark: the hourly job on 1M posts and the daily job on 1M, 5M and 10M mentions, on local[2].

Silver `mentions` (and engagements) are written directly with Spark from a synthetic, skewed
dataset (pushing 10M mentions through Kafka and the Python parse UDF would take far longer here
than the jobs themselves); the archive path is measured separately by the integration tests.
The largest day runs a second time with its count views already in Redis, as in production after
the hourly jobs (only views whose content changed are written).

The in-session figures run in the Spark session that loaded the data, so the JVM is already warm.
A scheduler starts every job as a new process, with a cold JVM; `--fresh` (the default) therefore
also runs the hourly job and the largest day through `trends batch` in a fresh process and reports
its wall time: that is the figure the aims are for. The fresh day runs as in production: its hours
are in the tables and published (the hourly jobs' work), its day views are not. The bench's own JVM
is stopped meanwhile (and a new one started after), so the fresh run has the machine to itself as
under a scheduler. Redis: a private redis-server started and stopped by this script. Figures go to
stdout as Markdown and to var/bench/batch.json.

    .venv/bin/python bench/batch_bench.py                   # hourly 1M posts; daily 1M, 5M, 10M mentions
    .venv/bin/python bench/batch_bench.py --daily 1000000    # one size only
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
"""The checkout: the bench runs from it and keeps its lake and figures under its var/."""
sys.path.insert(0, str(ROOT))

from trendcore.settings import Settings  # noqa: E402
from trendcore.windows import HOUR_MS, day_date  # noqa: E402

REGIONS = ["US", "GB", "DE", "FR", "JP", "BR", "IN", "KR", "ES", "MX"]
DAY = 20_731  # 2026-10-05, a Monday
TAGS_PER_POST = 2.5


def bench_settings(home: Path, base: int) -> Settings:
    return Settings(
        stack={"home": home}, redis={"url": f"redis://127.0.0.1:{base + 79}/0"},
        spark={"master": "local[2]", "lake": home / "lake", "shuffle_partitions": 4},
        kafka={"bootstrap": f"127.0.0.1:{base + 92}"},
    )


def synthetic(spark, posts: int, first_hour: int, hours: int, vocabulary: int = 200_000):
    """(mentions, engagements) DataFrames: posts spread over `hours`, 1-4 tags each (Zipf-like), 1 engagement
    per post."""
    from pyspark.sql import functions as F

    span = hours * HOUR_MS
    ids = spark.range(posts)
    u = lambda k: (F.pmod(F.hash(F.col("id"), F.lit(k)), F.lit(1_000_003)) / F.lit(1_000_003.0))  # noqa: E731
    regions = F.array(*[F.lit(r) for r in REGIONS])
    base = ids.select(
        F.concat(F.lit("b"), F.col("id").cast("string")).alias("post_id"),
        (F.lit(first_hour * HOUR_MS) + (F.col("id") * F.lit(span) / F.lit(posts)).cast("long")).alias("created_at"),
        F.element_at(regions, (F.pmod(F.hash("id", F.lit(1)), F.lit(10)) + 1).cast("int")).alias("region"),
        F.concat(F.lit("u"), F.pmod(F.hash("id", F.lit(2)), F.lit(100_000)).cast("string")).alias("user_id"),
        (F.lit(1) + F.floor(u(3) * F.lit(4))).cast("int").alias("ntags"),
        F.col("id"),
    )
    exploded = base.select("*", F.explode(F.sequence(F.lit(1), F.col("ntags"))).alias("k"))
    rank = F.floor(F.pow(F.pmod(F.hash("id", "k"), F.lit(1_000_003)) / F.lit(1_000_003.0), F.lit(4)) * vocabulary)
    mentions = exploded.select(
        "post_id", F.concat(F.lit("tag"), rank.cast("string")).alias("tag"), "region", "user_id", "created_at",
    ).dropDuplicates(["post_id", "tag"])
    mentions = mentions.select(
        "post_id", "tag", F.col("tag").alias("display"), "region", "user_id", "created_at",
        (F.col("created_at") / F.lit(HOUR_MS)).cast("long").alias("hour"),
        F.to_date(F.timestamp_millis("created_at")).alias("date"),
    )
    kinds = F.element_at(F.array(F.lit("view"), F.lit("view"), F.lit("like"), F.lit("repost")),
                         (F.pmod(F.hash("id", F.lit(5)), F.lit(4)) + 1).cast("int"))
    engagements = base.select(
        F.concat(F.lit("b"), F.pmod(F.hash("id", F.lit(6)), F.lit(posts)).cast("string")).alias("post_id"),
        "user_id", kinds.alias("kind"), "region", "created_at",
        (F.col("created_at") / F.lit(HOUR_MS)).cast("long").alias("hour"),
        F.to_date(F.timestamp_millis("created_at")).alias("date"),
    )
    return mentions, engagements


def load(spark, settings: Settings, posts: int, first_hour: int, hours: int) -> int:
    """Write silver mentions and bronze engagements of the synthetic dataset; returns mention rows."""
    from batch import tables
    from batch.tables import Lake

    lake = Lake.of(settings)
    mentions, engagements = synthetic(spark, posts, first_hour, hours)
    mentions.write.format("delta").mode("overwrite").partitionBy("date").save(lake.path(tables.MENTIONS))
    engagements.write.format("delta").mode("overwrite").partitionBy("date").save(lake.path(tables.BRONZE_ENGAGEMENTS))
    return spark.read.format("delta").load(lake.path(tables.MENTIONS)).count()


def footprints(spark, settings: Settings) -> dict:
    from batch import delta, tables
    from batch.tables import Lake

    lake = Lake.of(settings)
    return {t: delta.footprint(spark, lake, t) for t in tables.ALL_TABLES if delta.exists(spark, lake, t)}


def fresh_run(settings: Settings, *job: str) -> tuple[float, str]:
    """(wall seconds, last output line) of `trends batch <job>` in a new process, as Airflow runs it:
    Python and JVM start, Spark session, cold JIT and the job. Settings go through the environment."""
    from trendcore.settings import to_env

    env = {**os.environ, **to_env(settings), "COLUMNS": "1000"}  # COLUMNS: one line per message
    started = time.monotonic()
    done = subprocess.run([str(Path(sys.executable).with_name("trends")), "batch", *job], env=env,
                          capture_output=True, text=True, cwd=ROOT)
    seconds = time.monotonic() - started
    if done.returncode:
        raise SystemExit(f"trends batch {' '.join(job)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return seconds, lines[-1] if lines else ""


def forget_day_views(settings: Settings, day: int) -> int:
    """Delete the day's exact day views and their metas, keeping the hour views: Redis as the daily job
    finds it in production, after the hourly jobs published every hour. Returns keys deleted."""
    from adapters import redis as redis_io
    from trendcore.keys import KeySpace

    client, keys = redis_io.client(settings.redis), KeySpace.of(settings)
    patterns = (keys.match(f"exact:*:d:{day}"), keys.match(f"exact_meta:*:d:{day}"))
    doomed = [k for pattern in patterns for k in client.scan_iter(pattern, count=1000)]
    return client.delete(*doomed) if doomed else 0


def load_average() -> str:
    """The 1/5/15-minute load averages, recorded next to every figure (the machine is shared)."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hourly-posts", type=int, default=1_000_000)
    parser.add_argument("--daily", type=int, nargs="*", default=[1_000_000, 5_000_000, 10_000_000],
                        help="mention counts of the daily runs")
    parser.add_argument("--base-port", type=int, default=35500)
    parser.add_argument("--no-publish", action="store_true")
    parser.add_argument("--fresh", action=argparse.BooleanOptionalAction, default=True,
                        help="also time the hourly job and the largest day in a fresh `trends batch` process")
    args = parser.parse_args()
    home = ROOT / "var" / "bench-batch"
    shutil.rmtree(home / "lake", ignore_errors=True)
    settings = bench_settings(home, args.base_port)
    from trends.stack import manager

    manager.up(settings, names=["redis"], log=print)
    report: dict = {"hourly": None, "daily": [], "footprint": {}}
    try:
        started = time.monotonic()
        from adapters.spark import spark_session, stop_jvm

        spark = spark_session(settings, "batch-bench")
        session_s = time.monotonic() - started
        from batch import jobs

        if args.hourly_posts:
            hourly_settings = settings.model_copy(deep=True)
            hourly_settings.spark.lake = home / "lake" / "hourly"
            hour = DAY * 24 + 12
            t = time.monotonic()
            mentions = load(spark, hourly_settings, args.hourly_posts, hour, 1)
            load_s = time.monotonic() - t
            load_before = load_average()
            result = jobs.hourly(spark, hourly_settings, hour, "bench", publish_views=not args.no_publish)
            report["hourly"] = {"posts": args.hourly_posts, "mentions": mentions, "load_s": round(load_s, 1),
                                "job_s": round(result.seconds, 1), "session_s": round(session_s, 1),
                                "rows": result.rows, "keys": result.published, "phases": result.phases,
                                "load_average": [load_before, load_average()]}
            print(f"hourly: {args.hourly_posts:,} posts ({mentions:,} mentions): job {result.seconds:.1f} s "
                  f"+ session start {session_s:.1f} s = {result.seconds + session_s:.1f} s; rows {result.rows}; "
                  f"keys {result.published}; phases {result.phases}; load {load_before} -> {load_average()}",
                  flush=True)
            if args.fresh and not args.no_publish:
                from adapters import redis as redis_io

                redis_io.client(settings.redis).flushdb()  # so it publishes every view, as an hour's first run does
                text = f"{day_date(DAY).isoformat()}T12"  # `hour` as the CLI takes it
                stop_jvm(spark)  # alone on the machine, as a scheduler runs it (not beside our idle JVM)
                seconds, line = fresh_run(hourly_settings, "hourly", "--hour", text)
                spark = spark_session(settings, "batch-bench")
                report["hourly"]["fresh_s"] = round(seconds, 1)
                print(f"hourly in a fresh process (trends batch hourly --hour {text}): {seconds:.1f} s wall; {line}; "
                      f"load {load_average()}", flush=True)
        for size in args.daily:
            daily_settings = settings.model_copy(deep=True)
            daily_settings.spark.lake = home / "lake" / f"daily-{size}"
            t = time.monotonic()
            mentions = load(spark, daily_settings, int(size / TAGS_PER_POST), DAY * 24, 24)
            load_s = time.monotonic() - t
            load_before = load_average()
            result = jobs.daily(spark, daily_settings, DAY, "bench", publish_views=not args.no_publish)
            entry = {"mentions": mentions, "load_s": round(load_s, 1), "job_s": round(result.seconds, 1),
                     "rows": result.rows, "keys": result.published, "phases": result.phases,
                     "load_average": [load_before, load_average()]}
            report["daily"].append(entry)
            print(f"daily: {mentions:,} mentions: job {result.seconds:.1f} s; rows {result.rows}; "
                  f"keys {result.published}; phases {result.phases}; load {load_before} -> {load_average()}",
                  flush=True)
            if size == max(args.daily):
                if not args.no_publish:  # as after the hourly jobs: the day's views are published
                    again = jobs.daily(spark, daily_settings, DAY, "bench-again")
                    report["daily_again"] = {"mentions": mentions, "job_s": round(again.seconds, 1),
                                             "keys": again.published, "unchanged": again.unchanged,
                                             "phases": again.phases, "load_average": load_average()}
                    print(f"daily again ({again.unchanged} count views already published, unchanged): "
                          f"job {again.seconds:.1f} s; keys {again.published}; phases {again.phases}; "
                          f"load {load_average()}", flush=True)
                    if args.fresh:
                        forgotten = forget_day_views(daily_settings, DAY)
                        stop_jvm(spark)
                        date = day_date(DAY).isoformat()
                        seconds, line = fresh_run(daily_settings, "daily", "--date", date)
                        spark = spark_session(settings, "batch-bench")
                        report["daily_fresh"] = {"mentions": mentions, "fresh_s": round(seconds, 1), "output": line,
                                                 "day_keys_removed": forgotten, "load_average": load_average()}
                        print(f"daily as in production, in a fresh process (trends batch daily --date {date}; "
                              f"hour views published, the day's {forgotten} day-view keys removed first): "
                              f"{seconds:.1f} s wall; {line}; load {load_average()}", flush=True)
                before = footprints(spark, daily_settings)
                t = time.monotonic()
                jobs.maintain(spark, daily_settings.model_copy(update={"batch": daily_settings.batch.model_copy(
                    update={"vacuum": False})}), DAY)  # VACUUM keeps 7 days: it would delete nothing here
                after = footprints(spark, daily_settings)
                report["footprint"] = {
                    "mentions": mentions, "optimize_s": round(time.monotonic() - t, 1), "load_average": load_average(),
                    "tables": {name: {"before": before[name], "after": after.get(name)} for name in before},
                }
                print(f"OPTIMIZE of the day: {report['footprint']['optimize_s']} s; load {load_average()}")
                for name in before:
                    (b_bytes, b_files), (a_bytes, a_files) = before[name], after[name]
                    print(f"  {name}: {b_bytes / 1e6:.1f} MB in {b_files} files -> "
                          f"{a_bytes / 1e6:.1f} MB in {a_files} files")
    finally:
        manager.down(settings, log=print)
    out = ROOT / "var" / "bench" / "batch.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written {out}")


if __name__ == "__main__":
    main()
