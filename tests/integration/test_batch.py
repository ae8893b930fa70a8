"""The batch layer end to end on real Kafka, Spark with Delta and Redis, against the generator's ground truth.

One generated stream (duplicates, late and malformed records included) is produced once to this
module's own topics, archived once, and every test checks a different promise of the layer.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from adapters import kafka as kafka_io
from adapters import redis as redis_io
from batch import archive, delta, jobs, publish, tables, transforms
from batch.tables import Lake
from trendcore import keys
from trendcore.events import parse_timestamp
from trendcore.windows import HOUR_MS, hour_of_week, minute_of, parse_day
from trends.gen.model import GenConfig, Stream
from trends.gen.run import produce

pytestmark = pytest.mark.integration

START = "2026-10-05T21:30:00Z"  # a Monday; late posts reach back to 18:30, the stream ends 23:30: one UTC day
DAY = parse_day("2026-10-05")
POSTS = 8000


def isolated(settings, name: str, redis_db: int):
    """The test settings with this module's own topics, lake and Redis database."""
    own = settings.model_copy(deep=True)
    own.kafka.posts_topic, own.kafka.engagements_topic = f"{name}-posts", f"{name}-engagements"
    own.kafka.dead_letter_topic = f"{name}-dead-letters"
    own.spark.lake = settings.spark.lake / name
    own.redis.url = settings.redis.url.rsplit("/", 1)[0] + f"/{redis_db}"
    return own


@pytest.fixture(scope="module")
def world(stack, spark):
    """Produce one reproducible stream to fresh topics and archive it; yields (settings, stream)."""
    own = isolated(stack, f"batch-{int(time.time())}", redis_db=3)
    kafka_io.ensure_topics(own.kafka)
    redis_io.client(own.redis).flushdb()
    stream = Stream(GenConfig(seed=0xB47C, start_ms=parse_timestamp(START), event_rate=POSTS / 7200,
                              vocabulary=5000, wall_now_ms=int(time.time() * 1000)))
    produce(stream, own, count=POSTS)
    held = sum(kafka_io.end_offsets(own.kafka, own.kafka.engagements_topic).values())
    sent = stream.truth.engagement_count
    assert held == sent, f"Kafka holds {held} engagements, the generator sent {sent}"
    result = archive.run(spark, own)
    assert result.records > POSTS
    return own, stream


def hour_truth(truth, hour: int, region: str) -> Counter:
    return truth.counts(region, range(minute_of(hour * HOUR_MS), minute_of((hour + 1) * HOUR_MS)))


def table_rows(spark, lake: Lake, table: str, where: str) -> list[tuple]:
    return sorted(tuple(r) for r in delta.read(spark, lake, table).where(where).collect())


def test_quarantine_holds_every_malformed_record_with_its_reason(world, spark):
    own, stream = world
    rows = delta.read(spark, Lake.of(own), tables.QUARANTINE).collect()
    got = {r["key"].decode(): (r["field"], r["reason"]) for r in rows}
    sent = {m["key"]: m["kind"] for m in stream.truth.malformed}
    assert set(got) == set(sent) and len(rows) == len(sent)
    expected_field = {"missing_field": "user_id", "mistyped_field": "created_at", "far_future": "created_at",
                      "bad_region": "region", "text_too_long": "text", "bad_json": "", "invalid_utf8": ""}
    for key, kind in sent.items():
        assert got[key][0] == expected_field[kind], (kind, got[key])
        assert got[key][1]


def test_bronze_keeps_every_valid_record_exactly_once(world, spark):
    own, stream = world
    lake, truth = Lake.of(own), stream.truth
    assert delta.read(spark, lake, tables.BRONZE_POSTS).count() == truth.posts + truth.duplicates
    engagements = delta.read(spark, lake, tables.BRONZE_ENGAGEMENTS)
    if engagements.count() != truth.engagement_count:  # say which partition lost what, against Kafka
        per = {r["partition"]: (r["n"], r["last"]) for r in engagements.groupBy("partition")
               .agg(F.count("*").alias("n"), F.max("offset").alias("last")).collect()}
        ends = kafka_io.end_offsets(own.kafka, own.kafka.engagements_topic)
        pytest.fail(f"bronze (rows, last offset) per partition {per}, Kafka end offsets {ends}")
    assert delta.read(spark, lake, tables.POSTS).count() == truth.posts
    assert archive.run(spark, own).records == 0  # the checkpoint remembers: a second run reads nothing


def test_hourly_counts_equal_ground_truth_and_redis_holds_them(world, spark):
    own, stream = world
    hour = parse_timestamp("2026-10-05T22:00:00Z") // HOUR_MS
    result = jobs.hourly(spark, own, hour, run_id="t-hourly")
    rows = delta.read(spark, Lake.of(own), tables.HOURLY).where(f"hour = {hour}").collect()
    got: dict[str, Counter] = {}
    for r in rows:
        got.setdefault(r["region"], Counter())[r["tag"]] = r["mentions"]
    regions = {reg for (_, reg, m) in stream.truth.mentions if m // 60 == hour}
    assert set(got) == regions | {"all"}
    client = redis_io.client(own.redis)
    for region in got:
        assert got[region] == hour_truth(stream.truth, hour, region), region
        published = {k.decode(): int(v) for k, v in client.hgetall(keys.exact_hour(region, hour)).items()}
        assert published == dict(got[region])
        meta = client.hgetall(keys.exact_meta(region, "h", hour))
        assert meta[b"run_id"] == b"t-hourly" and int(meta[b"total"]) == sum(got[region].values())
        assert meta[b"digest"].decode() == publish.digest(got[region]) and int(meta[b"rows"]) == len(got[region])
        truth = spark.createDataFrame([("k", tag, n) for tag, n in got[region].items()],
                                      "key string, field string, value long")
        assert int(meta[b"fingerprint"]) == transforms.view_fingerprints(truth).first()["fingerprint"]
        assert client.ttl(keys.exact_hour(region, hour)) > 0
    assert result.rows[tables.ACCURACY] == len(got)


@pytest.mark.parametrize("partitions", [1, 4])
def test_accuracy_top_tags_from_partition_ranks_equal_the_true_top_tags(world, spark, partitions):
    """The accuracy check's exact top n per (hour, region), taken from the rows ranked n or better in
    their count partition, equals the top n of the ground truth (ties by tag). One partition: the
    partition ranks are the global ranks; four: the global top n is found among their unions."""
    own, stream = world
    n = 10
    mentions_df = delta.read(spark, Lake.of(own), tables.MENTIONS).where("date = '2026-10-05'")
    counts = transforms.tag_counts(mentions_df, ["hour"], partitions)
    got: dict[tuple[int, str], list] = {}
    for r in transforms.top_tags(transforms.top_tag_candidates(counts, n), n).collect():
        got.setdefault((r["hour"], r["region"]), []).append((-r["mentions"], r["tag"]))
    assert len(got) > 20
    for (hour, region), top in got.items():
        truth = hour_truth(stream.truth, hour, region)
        assert sorted(top) == sorted((-c, tag) for tag, c in truth.items())[:n], (hour, region)


@pytest.fixture(scope="module")
def day_done(world, spark):
    """The daily job run once over the generated day."""
    own, _ = world
    return jobs.daily(spark, own, DAY, run_id="t-daily")


def test_daily_counts_and_every_hour_equal_ground_truth(world, spark, day_done):
    own, stream = world
    lake, truth = Lake.of(own), stream.truth
    daily: dict[str, Counter] = {}
    for r in delta.read(spark, lake, tables.DAILY).where(f"day = {DAY}").collect():
        daily.setdefault(r["region"], Counter())[r["tag"]] = r["mentions"]
    assert daily["all"] == truth.counts("all")
    for region in daily:
        assert daily[region] == truth.counts(region), region
    hourly: dict[tuple[int, str], Counter] = {}
    for r in delta.read(spark, lake, tables.HOURLY).where("day(date) = 5").collect():
        hourly.setdefault((r["hour"], r["region"]), Counter())[r["tag"]] = r["mentions"]
    hours = {h for h, _ in hourly}
    assert len(hours) >= 5  # late posts reach back hours before the stream's start
    for (hour, region), counts in hourly.items():
        assert counts == hour_truth(truth, hour, region), (hour, region)
    client = redis_io.client(own.redis)
    assert {k.decode(): int(v) for k, v in client.hgetall(keys.exact_day("all", DAY)).items()} == dict(daily["all"])
    top = delta.read(spark, lake, tables.TOP_POSTS).where("region = 'all' AND rank = 1").collect()
    assert top and all(r["score"] > 0 for r in top)
    best = top[0]
    assert client.zscore(keys.exact_top_posts(best["tag"], DAY), best["post_id"]) == pytest.approx(best["score"])
    base = delta.read(spark, lake, tables.BASELINES).where("as_of = '2026-10-05'").collect()
    assert base and {r["method"] for r in base} == {"trailing_hourly_mean"}
    assert {r["hour_of_week"] for r in base} == set(range(24, 48))  # Tuesday: the day after as_of
    assert min(r["expected"] for r in base) >= own.batch.baseline_min_expected
    expected: dict[tuple[str, int], dict[str, float]] = {}
    for r in base:
        expected.setdefault((r["region"], r["hour_of_week"]), {})[r["tag"]] = r["expected"]
    for (region, how), tags in expected.items():  # staged once per region, COPYed to the other 23 hours
        published = {k.decode(): float(v) for k, v in client.hgetall(keys.baseline(region, how)).items()}
        assert published == pytest.approx(tags), (region, how)


def test_count_tables_are_stored_sorted_by_tag(world, spark, day_done):
    """Every file of the day's count tables holds its rows in tag order (tables.SORTED_BY: dictionary-encoded
    Parquet)."""
    import pyarrow.parquet as pq

    lake = Lake.of(world[0])
    for table in (tables.HOURLY, tables.DAILY):
        files = delta.read(spark, lake, table).where("date = '2026-10-05'").inputFiles()
        assert files, table
        for name in files:
            tags = pq.read_table(name.removeprefix("file:"), columns=["tag"])["tag"].to_pylist()
            assert len(tags) > 1 and tags == sorted(tags), (table, name)


def test_top_posts_equal_a_plain_python_ranking_of_the_day(world, spark, day_done):
    """top_posts_daily against the same ranking done row by row: engagement scores with the speed
    layer's weights, the best `top_posts` per (tag, region) and per tag worldwide, ties by post_id."""
    own, _ = world
    lake, speed, n = Lake.of(own), own.speed, own.batch.top_posts
    weights = {"like": speed.weight_like, "repost": speed.weight_repost, "view": speed.weight_view}
    scores: Counter = Counter()
    for r in delta.read(spark, lake, tables.BRONZE_ENGAGEMENTS).where("date = '2026-10-05'").collect():
        scores[r["post_id"]] += weights.get(r["kind"], 0.0)
    lists: dict[tuple[str, str], list] = {}
    for r in delta.read(spark, lake, tables.MENTIONS).where("date = '2026-10-05'").collect():
        if r["post_id"] in scores:
            for region in (r["region"], "all"):
                lists.setdefault((r["tag"], region), []).append((-round(scores[r["post_id"]], 6), r["post_id"]))
    expected = sorted((tag, region, rank + 1, post_id, -neg) for (tag, region), posts in lists.items()
                      for rank, (neg, post_id) in enumerate(sorted(posts)[:n]))
    got = sorted((r["tag"], r["region"], r["rank"], r["post_id"], r["score"]) for r in
                 delta.read(spark, lake, tables.TOP_POSTS).where(f"date = '2026-10-05' AND day = {DAY}").collect())
    assert len(got) == len(expected) and len(expected) > 100
    assert [g[:4] for g in got] == [e[:4] for e in expected]
    assert [g[4] for g in got] == pytest.approx([e[4] for e in expected])


def _snapshot(spark, own) -> tuple:
    lake = Lake.of(own)
    day = "date = '2026-10-05'"
    data = tuple(table_rows(spark, lake, t, day) for t in (tables.HOURLY, tables.DAILY, tables.TOP_POSTS))
    data += (table_rows(spark, lake, tables.BASELINES, "as_of = '2026-10-05'"),)
    client = redis_io.client(own.redis)
    views = {k: client.dump(k) for k in sorted(client.scan_iter("exact:*"))}
    views |= {k: client.dump(k) for k in sorted(client.scan_iter("baseline:*"))}
    views |= {k: client.dump(k) for k in sorted(client.scan_iter("exact_posts:*"))}
    metas = {k: client.hget(k, "digest") for k in sorted(client.scan_iter("exact_meta:*"))}
    return data, views, metas


def test_rerunning_an_hour_and_a_day_changes_nothing(world, spark, day_done):
    own, _ = world
    hour = parse_timestamp("2026-10-05T22:00:00Z") // HOUR_MS
    before = _snapshot(spark, own)
    assert before[1] and before[2]
    again = jobs.hourly(spark, own, hour, run_id="t-again")
    daily = jobs.daily(spark, own, DAY, run_id="t-again")
    after = _snapshot(spark, own)
    assert after[0] == before[0]
    assert after[1] == before[1]  # DUMP: byte-for-byte
    assert after[2] == before[2]
    client = redis_io.client(own.redis)
    # the exact count views were already there with this content: not written again, stamps kept
    assert again.published == 0 and again.unchanged > 0
    assert daily.unchanged == len(list(client.scan_iter("exact_meta:*")))
    assert daily.rewritten_hours == []  # every hour's table rows were already these
    assert client.hget(keys.exact_meta("all", "d", DAY), "run_id") == b"t-daily"
    assert not list(client.scan_iter("tmp:*"))


def test_the_daily_job_republishes_only_the_views_late_data_changed(world, spark, day_done):
    """A late mention for one hour: that hour's views (its region and `all`) and the day's are
    written again; every other hour keeps its published view and stamp."""
    own, _ = world
    lake, client = Lake.of(own), redis_io.client(own.redis)
    hour = parse_timestamp("2026-10-05T20:00:00Z") // HOUR_MS
    late = [("late-post-1", "latetag", "#LateTag", "FR", "late-user", hour * HOUR_MS + 60_000, hour)]
    spark.createDataFrame(late, "post_id string, tag string, display string, region string, user_id string, "
                                "created_at long, hour long").withColumn("date", F.to_date(F.lit("2026-10-05"))) \
        .write.format("delta").mode("append").save(lake.path(tables.MENTIONS))
    stamps = {k: client.hget(k, "run_id") for k in client.scan_iter("exact_meta:*")}
    result = jobs.daily(spark, own, DAY, run_id="t-late")
    changed = {k for k in client.scan_iter("exact_meta:*") if client.hget(k, "run_id") == b"t-late"}
    expected = {keys.exact_meta(r, "h", hour).encode() for r in ("FR", "all")}
    expected |= {keys.exact_meta(r, "d", DAY).encode() for r in ("FR", "all")}
    assert changed == expected
    assert all(client.hget(k, "run_id") == stamps[k] for k in stamps if k not in expected)
    assert result.unchanged == len(set(stamps) - expected)
    assert result.rewritten_hours == [hour]  # the table's other hours are left as the earlier runs wrote them
    rows = delta.read(spark, lake, tables.HOURLY).where(f"hour = {hour} AND tag = 'latetag'").collect()
    assert sorted((r["region"], r["mentions"], r["distinct_authors"]) for r in rows) == [("FR", 1, 1), ("all", 1, 1)]
    assert client.hget(keys.exact_hour("FR", hour), "latetag") == b"1"
    assert client.hget(keys.exact_day("all", DAY), "latetag") == b"1"


def test_a_duplicate_arriving_later_does_not_count_twice(world, spark):
    own, stream = world
    lake = Lake.of(own)
    first = delta.read(spark, lake, tables.BRONZE_POSTS).orderBy("kafka_ts", "partition", "offset").first()
    before = delta.read(spark, lake, tables.MENTIONS).count()
    producer = kafka_io.producer(own.kafka)
    producer.send(own.kafka.posts_topic, first["key"], bytes(first["value"]))
    producer.flush()
    assert archive.run(spark, own).records == 1
    assert delta.read(spark, lake, tables.MENTIONS).count() == before
    assert delta.read(spark, lake, tables.BRONZE_POSTS).where(f"post_id = '{first['post_id']}'").count() >= 2


def test_daily_on_a_fresh_lake_with_no_mentions_writes_empty_results(spark, settings):
    """A day with nothing archived (a new deployment's first daily run) succeeds with empty results."""
    own = isolated(settings, f"fresh-{int(time.time())}", redis_db=3)
    result = jobs.daily(spark, own, DAY, run_id="t-fresh", publish_views=False)
    assert result.rows[tables.HOURLY] == 0 and result.rows[tables.DAILY] == 0 and result.rewritten_hours == []


def test_a_pinned_read_keeps_its_snapshot_while_the_table_grows(spark, settings):
    """The daily job reads the mentions twice (counts, top posts): both reads must see the same rows."""
    lake = Lake.of(isolated(settings, "pinned", 0))
    rows = spark.createDataFrame([("a", 1)], "x string, n int")
    rows.write.format("delta").mode("overwrite").save(lake.path("pinned"))
    pinned, current = delta.read(spark, lake, "pinned", pinned=True), delta.read(spark, lake, "pinned")
    spark.createDataFrame([("b", 2)], "x string, n int").write.format("delta").mode("append").save(lake.path("pinned"))
    assert pinned.count() == 1
    assert current.count() == 2


def test_baselines_average_the_same_hour_of_week_or_fall_back_to_the_trailing_mean(spark):
    """Two weeks of history before Monday DAY: the baselines for Tuesday are the mean of the two
    Tuesdays at the same hour; tags under the minimum get none; one day of history: trailing mean."""
    tuesdays = [(DAY - 13) * 24 + 10, (DAY - 6) * 24 + 10]  # 10:00 on the two Tuesdays in the window
    rows = [("a", "US", tuesdays[0], 4), ("a", "US", tuesdays[1], 6), ("a", "US", DAY * 24 + 3, 20),
            ("rare", "US", tuesdays[1], 2), ("a", "US", (DAY - 30) * 24, 1000)]  # the last one: before the 4 weeks
    hourly = spark.createDataFrame(rows, "tag string, region string, hour long, mentions long")
    hourly = hourly.withColumn("date", F.expr("date_from_unix_date(cast(hour div 24 as int))"))

    def daily(hours: DataFrame) -> DataFrame:
        by_day = hours.groupBy("tag", "region", F.expr("hour div 24").alias("day"))
        return by_day.agg(F.sum("mentions").alias("mentions"))

    base = transforms.baselines(hourly, daily(hourly), DAY, (DAY - 30) * 24, weeks=2, min_mentions=5).collect()
    assert {(r["tag"], r["hour_of_week"], r["expected"], r["method"]) for r in base} == {
        ("a", 24 + 10, 5.0, "same_hour_of_week")}  # (4 + 6) / 2 weeks; "rare" has 2 < 5 mentions
    recent = hourly.where(f"hour >= {DAY * 24}")
    trailing = transforms.baselines(recent, daily(recent), DAY, DAY * 24, weeks=2, min_mentions=5).collect()
    assert {(r["tag"], r["expected"], r["method"]) for r in trailing} == {
        ("a", round(20 / 24, 6), "trailing_hourly_mean")}
    assert sorted(r["hour_of_week"] for r in trailing) == list(range(24, 48))


def test_the_hour_of_week_column_agrees_with_the_core(spark):
    """transforms.hour_of_week (a Spark Column) against its oracle trendcore.windows.hour_of_week: the
    first weeks of the epoch, weeks around the test data, and hours before the epoch."""
    hours = [*range(-400, 3 * 168), *range(DAY * 24 - 400, DAY * 24 + 400)]
    df = spark.createDataFrame([(h,) for h in hours], "hour long")
    rows = df.select("hour", transforms.hour_of_week(F.col("hour")).alias("how")).collect()
    got = {r["hour"]: r["how"] for r in rows}
    assert got == {h: hour_of_week(h) for h in hours}


def test_the_session_starts_from_the_class_archive(spark, settings):
    """scripts/bootstrap.sh records the JVM class archive; a session's driver JVM maps it."""
    from adapters.spark import class_archive_path

    archive = class_archive_path(settings)
    assert archive.exists(), "scripts/bootstrap.sh records it (`trends batch class-archive`)"
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    assert f"-XX:SharedArchiveFile={archive}" in list(runtime.getInputArguments())
