"""Engagements carrying one event_id count once in the batch layer's scores, also in a bronze table written
before event_id existed (the archive adds the column; its older rows read it as null and all count)."""

from __future__ import annotations

import datetime

import orjson
import pytest

from batch import delta, tables, transforms
from batch.tables import Lake
from trendcore.events import format_time

pytestmark = pytest.mark.integration

HOUR = 20_731 * 24 + 12  # an hour of 2026-10-05
AT = HOUR * 3_600_000
RAW = "topic string, partition int, offset long, key binary, value binary, timestamp timestamp"


def like(post_id: str, kind: str = "like", **extra) -> bytes:
    return orjson.dumps({"v": 1, "type": "engagement", "post_id": post_id, "user_id": "u1", "kind": kind,
                         "region": "US", "created_at": format_time(AT + 1000), **extra})


def kafka_rows(spark, values: list[bytes]):
    """The values as the archive reads them from Kafka (one partition, consecutive offsets)."""
    stamp = datetime.datetime.fromtimestamp(AT / 1000 + 5, tz=datetime.timezone.utc)
    return spark.createDataFrame([("engagements", 0, i, b"p", v, stamp) for i, v in enumerate(values)], RAW)


def test_a_repeated_event_id_counts_once_in_the_scores(spark, tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    old = spark.createDataFrame(  # bronze as the archive wrote it before event_id
        [("p1", "u0", "like", "US", AT, HOUR, datetime.date(2026, 10, 5))] * 2,
        "post_id string, user_id string, kind string, region string, created_at long, hour long, date date")
    old.write.format("delta").mode("overwrite").partitionBy("date").save(lake.path(tables.BRONZE_ENGAGEMENTS))

    values = [like("p1", event_id="e1"), like("p1", event_id="e1"), like("p1", event_id="e1"),  # a write retried
              like("p1", kind="view", event_id="e2"), like("p1"), like("p2", event_id="e3"), like("p2", event_id="e3")]
    parsed = transforms.parse_kafka(kafka_rows(spark, values), {"engagements": "engagement"}, 300_000)
    delta.append_once(transforms.bronze_engagements(parsed), lake, tables.BRONZE_ENGAGEMENTS, "t", 0,
                      add_columns=True)

    bronze = delta.read(spark, lake, tables.BRONZE_ENGAGEMENTS)
    assert bronze.count() == 9  # bronze keeps every record, copies too
    assert bronze.where("event_id is null").count() == 3  # the two older rows and the one without an id
    scores = {r["post_id"]: r["score"] for r in transforms.engagement_scores(bronze, 1.0, 3.0, 0.1).collect()}
    assert scores == {"p1": 2.0 + 1.0 + 0.1 + 1.0, "p2": 1.0}


def test_without_an_event_id_column_every_engagement_counts(spark):
    rows = spark.createDataFrame([("p1", "like")] * 3, "post_id string, kind string")
    assert transforms.engagement_scores(rows, 1.0, 3.0, 0.1).collect()[0]["score"] == 3.0
