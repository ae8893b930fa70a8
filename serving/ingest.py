"""Writes: decode a JSON body, validate each record with the event contract, produce the valid ones
to Kafka (idempotent, acks=all), and optionally wait until the speed layer has counted them."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import orjson
import redis
from starlette.concurrency import run_in_threadpool

from adapters.kafka import Producer
from serving import store
from serving.errors import BadRequest
from trendcore.errors import InvalidRecord, ServiceError
from trendcore.events import Post, engagement_record, post_record, validate_object
from trendcore.keys import KeySpace
from trendcore.settings import Settings

POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class Delivery:
    """Where Kafka stored one accepted record."""

    index: int
    post_id: str
    topic: str
    partition: int
    offset: int


def decode(body: bytes, max_batch: int, single_allowed: bool) -> list[object]:
    """The records of a body: a JSON array, or (for POST /posts) one object; BadRequest otherwise."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"body: malformed JSON ({exc.msg})") from None
    if isinstance(doc, dict) and single_allowed:
        return [doc]
    if not isinstance(doc, list):
        wanted = "a JSON object or an array of objects" if single_allowed else "a JSON array of records"
        raise BadRequest(f"body: expected {wanted}, got {type(doc).__name__}")
    if not doc:
        raise BadRequest("body: empty batch")
    if len(doc) > max_batch:
        raise BadRequest(f"body: {len(doc)} records, at most {max_batch} per request")
    return doc


def validate(records: list[object], expected: str | None, now_ms: int,
             settings: Settings) -> tuple[list[tuple[int, Post | object]], list[dict]]:
    """Split records into (index, valid record) and per-record errors naming field and reason."""
    valid, errors = [], []
    max_future_ms = settings.validation.max_future_s * 1000
    for index, obj in enumerate(records):
        try:
            valid.append((index, validate_object(obj, expected, now_ms, max_future_ms)))
        except InvalidRecord as exc:
            errors.append({"index": index, "field": exc.field, "error": exc.reason})
    return valid, errors


def produce(producer: Producer, settings: Settings, valid: list[tuple[int, object]]) -> list[Delivery]:
    """Produce records keyed by post id and wait for every acknowledgement (ServiceError on failure)."""
    results: dict[int, tuple] = {}
    for index, record in valid:
        is_post = isinstance(record, Post)
        topic = settings.kafka.posts_topic if is_post else settings.kafka.engagements_topic
        wire = post_record(record) if is_post else engagement_record(record)

        def delivered(err, msg, index=index) -> None:
            results[index] = (err, msg.topic(), msg.partition(), msg.offset())

        producer.send(topic, record.post_id.encode(), orjson.dumps(wire), on_delivery=delivered)
    producer.flush(settings.api.produce_timeout_s)
    failed = [(i, r[0]) for i, r in results.items() if r[0] is not None]
    if failed or len(results) < len(valid):
        first = failed[0][1] if failed else "no acknowledgement"
        missing = len(failed) or len(valid) - len(results)
        raise ServiceError(f"Kafka: {missing} records not written ({first}); retrying is safe, post ids deduplicate")
    return [Delivery(i, rec.post_id, *results[i][1:]) for i, rec in valid]


async def wait_counted(client: redis.Redis, keys: KeySpace, group: str, deliveries: list[Delivery],
                       timeout_s: float) -> bool:
    """Poll the speed layer's stored offsets until each partition passes its record's offset (or time out).

    Async, with one MGET per poll in the thread pool: a waiting request holds no thread while it sleeps.
    """
    needed: dict[tuple[str, int], int] = {}
    for d in deliveries:
        needed[(d.topic, d.partition)] = max(d.offset, needed.get((d.topic, d.partition), -1))
    deadline = time.monotonic() + timeout_s
    while True:
        parts = list(needed)
        stored = await run_in_threadpool(store.stored_offsets, client, keys, group, parts)
        for part, value in zip(parts, stored, strict=True):
            if value is not None and value > needed[part]:
                del needed[part]
        if not needed:
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(POLL_S)
