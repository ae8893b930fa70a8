"""One round trip per real component, started through the project's own stack manager."""

from __future__ import annotations

import uuid

import pytest

from adapters import kafka as kafka_io
from adapters import redis as redis_io

pytestmark = pytest.mark.integration


def test_kafka_produce_and_consume(stack):
    topic = stack.kafka.posts_topic
    marker = uuid.uuid4().hex.encode()
    producer = kafka_io.producer(stack.kafka)
    delivered = []
    producer.send(topic, b"k-" + marker, b'{"probe": "' + marker + b'"}',
                  on_delivery=lambda err, msg: delivered.append((err, msg)))
    producer.flush()
    err, meta = delivered[0]
    assert err is None
    from kafka import TopicPartition

    consumer = kafka_io.consumer(stack.kafka, consumer_timeout_ms=10_000)
    tp = TopicPartition(topic, meta.partition())
    consumer.assign([tp])
    consumer.seek(tp, meta.offset())
    record = next(iter(consumer))
    consumer.close()
    assert record.key == b"k-" + marker
    assert marker in record.value


def test_topics_have_configured_partitions(stack):
    for topic in stack.kafka.topics:
        assert len(kafka_io.end_offsets(stack.kafka, topic)) == stack.kafka.partitions


def test_redis_round_trip(stack):
    client = redis_io.client(stack.redis)
    key = f"probe:{uuid.uuid4().hex}"
    client.set(key, b"\x00\x01", ex=60)
    assert client.get(key) == b"\x00\x01"
    assert client.ttl(key) > 0


def test_spark_writes_and_reads_delta(spark, settings, tmp_path):
    path = str(tmp_path / "delta_probe")
    rows = [(i, f"tag{i}") for i in range(100)]
    spark.createDataFrame(rows, "id INT, tag STRING").write.format("delta").mode("overwrite").save(path)
    back = spark.read.format("delta").load(path)
    assert sorted((r.id, r.tag) for r in back.collect()) == rows
    from delta.tables import DeltaTable

    assert DeltaTable.forPath(spark, path).history().count() == 1
