"""Thin Kafka adapter: clients built from settings, topic creation, errors wrapped.

Consumers and the admin client are kafka-python. Producing uses confluent-kafka (librdkafka):
kafka-python's producer tops out near 10,000 records/s on one core here, librdkafka sends over
300,000, and the load generator must outpace the speed layer it measures (docs/decisions.md).
Both partition keyed records with murmur2, so any client puts a post id on the same partition.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import confluent_kafka
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from trendcore.errors import ServiceError
from trendcore.settings import KafkaSettings


@contextmanager
def kafka_errors(action: str) -> Iterator[None]:
    """Re-raise kafka-python errors as ServiceError, saying what we were doing."""
    try:
        yield
    except KafkaError as exc:
        raise ServiceError(f"Kafka: {action} failed: {exc}") from exc


class Producer:
    """An idempotent, batching producer (acks=all); `send` never blocks for long, `flush` reports failures."""

    def __init__(self, kafka: KafkaSettings, **overrides: object) -> None:
        config = {
            "bootstrap.servers": kafka.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "partitioner": "murmur2_random",
            "message.timeout.ms": kafka.request_timeout_ms * 4,
        }
        config.update(overrides)
        self._producer = confluent_kafka.Producer(config)
        self._errors: list[str] = []

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self._errors.append(f"{msg.topic()}: {err}")

    def send(self, topic: str, key: bytes | None, value: bytes, on_delivery=None) -> None:
        """Queue one record; waits only while the local queue is full."""
        callback = on_delivery or self._delivered
        while True:
            try:
                self._producer.produce(topic, value, key, on_delivery=callback)
                break
            except BufferError:
                self._producer.poll(0.05)
            except confluent_kafka.KafkaException as exc:
                raise ServiceError(f"Kafka: producing to {topic} failed: {exc}") from exc
        self._producer.poll(0)

    def flush(self, timeout_s: float = 60.0) -> None:
        """Wait until every queued record is acknowledged; raise ServiceError naming failures."""
        left = self._producer.flush(timeout_s)
        if left:
            raise ServiceError(f"Kafka: {left} records not acknowledged after {timeout_s:.0f} s")
        if self._errors:
            errors, self._errors = self._errors, []
            raise ServiceError(f"Kafka: {len(errors)} records failed, first: {errors[0]}")

    def close(self) -> None:
        self.flush()


def producer(kafka: KafkaSettings, **overrides: object) -> Producer:
    """A producer for our topics (librdkafka options may be overridden)."""
    return Producer(kafka, **overrides)


def consumer(kafka: KafkaSettings, *topics: str, **overrides) -> KafkaConsumer:
    """A consumer of `topics` (none: assign partitions yourself)."""
    options = dict(bootstrap_servers=kafka.bootstrap.split(","), request_timeout_ms=kafka.request_timeout_ms)
    options.update(overrides)
    with kafka_errors(f"connecting a consumer to {kafka.bootstrap}"):
        return KafkaConsumer(*topics, **options)


def ensure_topics(kafka: KafkaSettings, partitions: int | None = None) -> list[str]:
    """Create the project's topics if missing; return the names that were created."""
    count = partitions or kafka.partitions
    with kafka_errors(f"creating topics on {kafka.bootstrap}"):
        admin = KafkaAdminClient(
            bootstrap_servers=kafka.bootstrap.split(","), request_timeout_ms=kafka.request_timeout_ms
        )
        try:
            existing = set(admin.list_topics())
            wanted = [t for t in kafka.topics if t not in existing]
            if wanted:
                try:
                    admin.create_topics([NewTopic(t, count, 1) for t in wanted])
                except TopicAlreadyExistsError:
                    pass
            return wanted
        finally:
            admin.close()


def end_offsets(kafka: KafkaSettings, topic: str) -> dict[int, int]:
    """The next offset of every partition of a topic."""
    from kafka import TopicPartition

    with kafka_errors(f"reading end offsets of {topic}"):
        client = consumer(kafka)
        try:
            parts = [TopicPartition(topic, p) for p in sorted(client.partitions_for_topic(topic) or [])]
            return {tp.partition: off for tp, off in client.end_offsets(parts).items()}
        finally:
            client.close()
