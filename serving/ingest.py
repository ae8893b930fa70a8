"""Writes: decode a JSON body, validate each record with the event contract, produce the valid ones
to Kafka (idempotent, acks=all) waiting for their own delivery reports (serving/delivery.py), and optionally
wait until the speed layer has counted them."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import orjson
import redis

from adapters.kafka import Producer, Report
from serving import delivery, store
from serving.delivery import NotWritten, Sent, Waiter
from serving.errors import BadRequest
from serving.pools import Pools
from trendcore.errors import InvalidRecord, ServiceError
from trendcore.events import Post, engagement_record, post_record, validate_object
from trendcore.keys import KeySpace
from trendcore.settings import Settings

POLL_S = 0.05
REPORT_GRACE_S = 0.25
"""A write waits this much beyond `produce_timeout_s` (librdkafka's message timeout) for the timed-out reports."""
AUTH_CHECK_S = 0.25
"""How often a waiting write looks whether the broker refused our credentials."""


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


def sent_records(settings: Settings, valid: list[tuple[int, object]]) -> list[tuple[Sent, bytes]]:
    """Each valid record's Sent (topic, how a copy deduplicates) and its wire form."""
    out = []
    for index, record in valid:
        if isinstance(record, Post):
            sent = Sent(index, record.post_id, settings.kafka.posts_topic, delivery.BY_POST_ID)
            wire = post_record(record)
        else:
            dedup = delivery.BY_EVENT_ID if getattr(record, "event_id", None) else None
            sent = Sent(index, record.post_id, settings.kafka.engagements_topic, dedup)
            wire = engagement_record(record)
        out.append((sent, orjson.dumps(wire)))
    return out


def _send_all(producer: Producer, records: list[tuple[Sent, bytes]], waiter: Waiter) -> None:
    """Queue every record keyed by post id, its report going to the waiter; records that could not be queued
    are reported not written (nothing of them reached Kafka)."""
    for position, (sent, value) in enumerate(records):
        try:
            producer.send_reported(sent.topic, sent.post_id.encode(), value, waiter.callback(sent.index))
        except ServiceError as exc:
            for rest, _ in records[position:]:
                waiter.record(rest.index, Report(rest.topic, -1, -1, str(exc), maybe_written=False))
            return


async def produce(producer: Producer, pools: Pools, settings: Settings,
                  valid: list[tuple[int, object]]) -> list[Delivery]:
    """Produce records keyed by post id and wait for the delivery reports of these records only (up to
    `api.produce_timeout_s`); NotWritten saying per record what happened unless every one was stored."""
    records = sent_records(settings, valid)
    sent = [s for s, _ in records]
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    waiter = Waiter(sent, lambda: loop.call_soon_threadsafe(_settle, done))
    await pools.write(_send_all, producer, records, waiter)
    timeout = settings.api.produce_timeout_s
    refusal = await _await_reports(done, producer, timeout + REPORT_GRACE_S)
    if refusal is not None:  # the broker refused our credentials: nothing was accepted, nothing will be
        for index in waiter.missing():
            s = next(x for x in sent if x.index == index)
            waiter.record(index, Report(s.topic, -1, -1, str(refusal), maybe_written=False))
    result = delivery.outcome(sent, waiter.reports())
    if not result.complete:
        raise NotWritten(result, timeout, None if refusal is not None else producer.reason())
    return [Delivery(s.index, s.post_id, r.topic, r.partition, r.offset) for s, r in result.written]


def _settle(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


async def _await_reports(done: asyncio.Future[None], producer: Producer, timeout_s: float) -> ServiceError | None:
    """Wait until every report is in or time is up; stop early, returning the error, when the broker refuses our
    credentials (librdkafka would retry them silently until the records time out)."""
    deadline = time.monotonic() + timeout_s
    while not done.done():
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        await asyncio.wait([done], timeout=min(AUTH_CHECK_S, left))
        refusal = producer.auth_refusal()
        if refusal is not None and not done.done():
            return refusal
    return None


async def wait_counted(client: redis.Redis, keys: KeySpace, deliveries: list[Delivery], timeout_s: float,
                       pools: Pools) -> bool:
    """Poll the offsets the speed layer's merger last merged up to (`part:{p<N>}:merged:{topic}`) until each
    partition passes its record's offset (or time out): then the record is in the keys answers read, not only
    in its partition's checkpoint.

    Async, with one MGET per poll on a read thread (within the read budget): a waiting request holds no thread
    while it sleeps.
    """
    needed: dict[tuple[str, int], int] = {}
    for d in deliveries:
        needed[(d.topic, d.partition)] = max(d.offset, needed.get((d.topic, d.partition), -1))
    deadline = time.monotonic() + timeout_s
    while True:
        parts = list(needed)
        stored = await pools.read(store.merged_offsets, client, keys, parts)
        for part, value in zip(parts, stored, strict=True):
            if value is not None and value > needed[part]:
                del needed[part]
        if not needed:
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(POLL_S)
