"""Thin kafka-python adapter: clients built from settings, topic creation, errors wrapped."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
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


def producer(kafka: KafkaSettings, **overrides) -> KafkaProducer:
    """An idempotent producer (acks=all) that batches; keys and values are bytes."""
    options = dict(
        bootstrap_servers=kafka.bootstrap.split(","),
        acks="all",
        enable_idempotence=True,
        linger_ms=20,
        batch_size=256 * 1024,
        compression_type=None,
        request_timeout_ms=kafka.request_timeout_ms,
    )
    options.update(overrides)
    with kafka_errors(f"connecting a producer to {kafka.bootstrap}"):
        return KafkaProducer(**options)


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
        admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap.split(","), request_timeout_ms=kafka.request_timeout_ms)
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
