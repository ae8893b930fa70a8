"""The Delta tables of the batch layer: names, locations and partition columns, in one place."""

from __future__ import annotations

from dataclasses import dataclass

from trendcore import lake
from trendcore.settings import Settings

BRONZE_POSTS = "bronze_posts"
BRONZE_ENGAGEMENTS = "bronze_engagements"
QUARANTINE = "quarantine"
POSTS = "posts"
MENTIONS = "mentions"
HOURLY = "tag_counts_hourly"
DAILY = "tag_counts_daily"
BASELINES = "trend_baselines"
TOP_POSTS = "top_posts_daily"
ACCURACY = "speed_accuracy"

PARTITIONS = {
    BRONZE_POSTS: ["date"],
    BRONZE_ENGAGEMENTS: ["date"],
    QUARANTINE: ["date"],
    POSTS: ["date"],
    MENTIONS: ["date"],
    HOURLY: ["date"],
    DAILY: ["date"],
    BASELINES: ["as_of"],
    TOP_POSTS: ["date"],
    ACCURACY: ["date"],
}
"""Partition columns of every table (`date` is the UTC event date; quarantine: the Kafka date)."""

SORTED_BY = {HOURLY: ["tag"], DAILY: ["tag"]}
"""Columns the rows of a table's files are sorted by, as `delta.replace` writes them. Parquet keeps a
column dictionary-encoded only if its first page compresses that way: in shuffle order the count tables'
first page may hold mostly distinct tags and fall back to plain; sorted, a tag's rows (one per region)
are adjacent, so `tag` stays encoded."""

ALL_TABLES = list(PARTITIONS)


@dataclass(frozen=True)
class Lake:
    """Where the tables live: `root/<name>` (a local path or a URI such as s3a://bucket/prefix), plus the
    archive's checkpoint. The strings are what Spark and delta-rs take (trendcore.lake does the arithmetic)."""

    root: str

    @classmethod
    def of(cls, settings: Settings) -> Lake:
        return cls(lake.join(settings.spark.lake))

    def path(self, table: str) -> str:
        return lake.join(self.root, table)

    @property
    def checkpoint(self) -> str:
        return lake.join(self.root, "_checkpoints", "archive")

    @property
    def is_local(self) -> bool:
        """True when the tables are on this machine's file system (not an object store)."""
        return lake.is_local(self.root)

    def storage_options(self, settings: Settings) -> dict[str, str]:
        """Options for delta-rs (`deltalake.DeltaTable(lake.path(t), storage_options=...)`) to read these
        tables with the S3 settings Spark has (`spark.conf`); {} for a local lake."""
        return lake.delta_rs_storage_options(self.root, settings.spark.conf)
