"""Archive Kafka into Delta: bronze posts/engagements, quarantine, and deduplicated silver posts/mentions.

Structured Streaming with trigger availableNow and a checkpoint: each run drains what Kafka holds
and stops. Exactly once: bronze and quarantine appends carry (txnAppId, batch id), so a batch
replayed after a crash is skipped; silver gets only post ids it has never seen (anti-join).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from batch import delta, tables, transforms
from batch.tables import Lake
from trendcore import kafka_config
from trendcore.settings import Settings

APP_ID = "trends-archive"


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


def write_batch(batch: DataFrame, batch_id: int, settings: Settings) -> None:
    """One micro-batch: parse once, append bronze and quarantine once, merge new posts into silver."""
    lake = Lake.of(settings)
    topic_types = {settings.kafka.posts_topic: "post", settings.kafka.engagements_topic: "engagement"}
    parsed = transforms.parse_kafka(batch, topic_types, settings.validation.max_future_s * 1000).persist()
    try:
        posts = transforms.bronze_posts(parsed)
        delta.append_once(posts, lake, tables.BRONZE_POSTS, APP_ID, batch_id)
        delta.append_once(transforms.bronze_engagements(parsed), lake, tables.BRONZE_ENGAGEMENTS, APP_ID, batch_id)
        delta.append_once(transforms.quarantine(parsed), lake, tables.QUARANTINE, APP_ID, batch_id)
        merge_new_posts(posts, lake, batch_id)
    finally:
        parsed.unpersist()


def merge_new_posts(posts: DataFrame, lake: Lake, batch_id: int) -> None:
    """Posts never seen before (by post_id, across all time) into silver `mentions`, then `posts`.

    Both appends carry (APP_ID, batch id). Mentions first: after a crash between the two, the
    replay finds the same new posts (silver `posts` did not change), skips `mentions` and appends `posts`.
    """
    spark = posts.sparkSession
    fresh = transforms.silver_posts(transforms.first_copies(posts))
    if delta.exists(spark, lake, tables.POSTS):
        known = delta.read(spark, lake, tables.POSTS).select("post_id")
        fresh = fresh.join(known, "post_id", "left_anti")
    fresh = fresh.persist()
    try:
        delta.append_once(transforms.mentions(fresh), lake, tables.MENTIONS, APP_ID, batch_id)
        delta.append_once(fresh, lake, tables.POSTS, APP_ID, batch_id)
    finally:
        fresh.unpersist()


def run(spark: SparkSession, settings: Settings) -> ArchiveResult:
    """Drain Kafka into the archive (availableNow) and wait until done."""
    lake = Lake.of(settings)
    with delta.spark_errors("archiving Kafka"):
        query = (
            kafka_stream(spark, settings).writeStream
            .foreachBatch(lambda df, batch_id: write_batch(df, batch_id, settings))
            .option("checkpointLocation", lake.checkpoint)
            .trigger(availableNow=True)
            .queryName("trends-archive")
            .start()
        )
        query.awaitTermination()
        progress = query.recentProgress
    records = sum(int(p.get("numInputRows", 0)) for p in progress)
    batches = sum(1 for p in progress if int(p.get("numInputRows", 0)) > 0)
    return ArchiveResult(batches, records)
