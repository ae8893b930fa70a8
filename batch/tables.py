"""The Delta tables of the batch layer: names, locations and partition columns, in one place."""

from __future__ import annotations

from dataclasses import dataclass

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
    """Where the tables live: `root/<name>` (any Hadoop path), plus the archive's checkpoint."""

    root: str

    @classmethod
    def of(cls, settings: Settings) -> Lake:
        return cls(str(settings.spark.lake).rstrip("/"))

    def path(self, table: str) -> str:
        return f"{self.root}/{table}"

    @property
    def checkpoint(self) -> str:
        return f"{self.root}/_checkpoints/archive"
