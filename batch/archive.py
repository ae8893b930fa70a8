"""Archive Kafka into Delta: bronze posts/engagements, quarantine, and deduplicated silver posts/mentions.

Structured Streaming with trigger availableNow and a checkpoint: each run drains what Kafka holds
and stops. Exactly once: bronze and quarantine appends carry (txnAppId, batch id), so a batch
replayed after a crash is skipped; silver gets only post ids it has never seen (anti-join). The
txnAppId names the checkpoint (its query id), so a reset checkpoint, whose batch ids restart at 0,
is never taken for batches already written.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from batch import delta, tables, transforms
from batch.tables import Lake
from trendcore import kafka_config
from trendcore.errors import ServiceError
from trendcore.settings import Settings

APP_ID = "trends-archive"
"""Prefix of the txnAppId of every archive append; the checkpoint's query id completes it (`app_id`)."""

QUERY_ID_WAIT_S = 120.0
"""How long a micro-batch waits for `start()` to hand it the query id (it returns within seconds)."""


@dataclass
class ArchiveResult:
    batches: int
    records: int


def kafka_stream(spark: SparkSession, settings: Settings) -> DataFrame:
    """The posts and engagements topics from the earliest offset, in bounded micro-batches, over the
    configured security (TLS, SASL: `kafka.`-prefixed Java client options, trendcore.kafka_config)."""
    kafka = settings.kafka
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .options(**kafka_config.spark_options(kafka.security()))
        .option("subscribe", f"{kafka.posts_topic},{kafka.engagements_topic}")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", settings.batch.max_offsets_per_trigger)
        .option("kafka.request.timeout.ms", kafka.request_timeout_ms)
        .load()
    )


def app_id(query_id: str) -> str:
    """The txnAppId of one checkpoint's appends. Batch ids restart at 0 in a new checkpoint: under a fixed
    app id Delta would skip its batches as written until they passed the old checkpoint's last id."""
    return f"{APP_ID}-{query_id}"


class QueryId:
    """The streaming query's id, from `start()` to the micro-batches. Spark keeps it in the checkpoint
    (`<checkpoint>/metadata`), so it names the checkpoint; batch 0 may begin before `start()` returns."""

    def __init__(self) -> None:
        self._value = ""
        self._known = threading.Event()

    def set(self, value: str) -> None:
        self._value = value
        self._known.set()

    def get(self, timeout_s: float = QUERY_ID_WAIT_S) -> str:
        """The id, once `set` (ServiceError if it never comes)."""
        if not self._known.wait(timeout_s):
            raise ServiceError(f"archive: the streaming query's id was not known within {timeout_s:.0f} s")
        return self._value


def write_batch(batch: DataFrame, batch_id: int, settings: Settings, app: str) -> None:
    """One micro-batch: parse once, append bronze and quarantine once, merge new posts into silver.

    `app` is the checkpoint's txnAppId (`app_id`). Batch 0, the first of a checkpoint, first completes
    silver `posts` from what an earlier checkpoint may have left torn (`complete_torn_posts`)."""
    lake = Lake.of(settings)
    topic_types = {settings.kafka.posts_topic: "post", settings.kafka.engagements_topic: "engagement"}
    if batch_id == 0:
        complete_torn_posts(batch.sparkSession, lake)
    parsed = transforms.parse_kafka(batch, topic_types, settings.validation.max_future_s * 1000).persist()
    try:
        posts = transforms.bronze_posts(parsed)
        delta.append_once(posts, lake, tables.BRONZE_POSTS, app, batch_id)
        engagements = transforms.bronze_engagements(parsed)  # event_id: added to a table from before it
        delta.append_once(engagements, lake, tables.BRONZE_ENGAGEMENTS, app, batch_id, add_columns=True)
        delta.append_once(transforms.quarantine(parsed), lake, tables.QUARANTINE, app, batch_id)
        merge_new_posts(posts, lake, app, batch_id)
    finally:
        parsed.unpersist()


def merge_new_posts(posts: DataFrame, lake: Lake, app: str, batch_id: int) -> None:
    """Posts never seen before (by post_id, across all time) into silver `mentions`, then `posts`.

    Both appends carry (app, batch id). Mentions first: after a crash between the two, the replay
    finds the same new posts (silver `posts` did not change), skips `mentions` and appends `posts`.
    """
    spark = posts.sparkSession
    fresh = transforms.silver_posts(transforms.first_copies(posts))
    if delta.exists(spark, lake, tables.POSTS):
        known = delta.read(spark, lake, tables.POSTS).select("post_id")
        fresh = fresh.join(known, "post_id", "left_anti")
    fresh = fresh.persist()
    try:
        delta.append_once(transforms.mentions(fresh), lake, tables.MENTIONS, app, batch_id)
        delta.append_once(fresh, lake, tables.POSTS, app, batch_id)
    finally:
        fresh.unpersist()


def complete_torn_posts(spark: SparkSession, lake: Lake) -> int:
    """Append to silver `posts`, from their first copy in bronze, the posts whose mentions silver holds but
    `posts` lacks (a crash between the two appends); returns how many.

    In the same checkpoint the replayed batch completes them itself. After a checkpoint reset no batch
    replays under the old app id: the posts would look new and their mentions would count twice."""
    if not delta.exists(spark, lake, tables.MENTIONS):
        return 0
    torn = delta.read(spark, lake, tables.MENTIONS).select("post_id").distinct()
    if delta.exists(spark, lake, tables.POSTS):
        torn = torn.join(delta.read(spark, lake, tables.POSTS).select("post_id"), "post_id", "left_anti")
    copies = delta.read(spark, lake, tables.BRONZE_POSTS).join(torn, "post_id", "left_semi")
    missing = transforms.silver_posts(transforms.first_copies(copies)).persist()
    try:
        count = missing.count()
        if count:
            delta.append(missing, lake, tables.POSTS)
        return count
    finally:
        missing.unpersist()


def run(spark: SparkSession, settings: Settings) -> ArchiveResult:
    """Drain Kafka into the archive (availableNow) and wait until done; the appends' txnAppId is
    `app_id` of the query's id, which Spark reads from the checkpoint (or writes into a new one)."""
    lake = Lake.of(settings)
    query_id = QueryId()
    with delta.spark_errors("archiving Kafka"):
        query = (
            kafka_stream(spark, settings).writeStream
            .foreachBatch(lambda df, batch_id: write_batch(df, batch_id, settings, app_id(query_id.get())))
            .option("checkpointLocation", lake.checkpoint)
            .trigger(availableNow=True)
            .queryName("trends-archive")
            .start()
        )
        query_id.set(query.id)
        query.awaitTermination()
        progress = query.recentProgress
    records = sum(int(p.get("numInputRows", 0)) for p in progress)
    batches = sum(1 for p in progress if int(p.get("numInputRows", 0)) > 0)
    return ArchiveResult(batches, records)
