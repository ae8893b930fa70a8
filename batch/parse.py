"""Pure record functions the Spark jobs wrap in UDFs: the same contract and extraction as the speed layer."""

from __future__ import annotations

from typing import NamedTuple

from trendcore.errors import InvalidRecord
from trendcore.events import Post, parse_record
from trendcore.hashtags import tag_keys


class Parsed(NamedTuple):
    """The contract's verdict on one Kafka value: a valid record's fields, or the field and reason it was refused.

    Its fields, in order, are the struct of the Spark UDF (`batch.transforms.PARSED`).
    """

    ok: bool
    type: str | None = None
    post_id: str | None = None
    user_id: str | None = None
    region: str | None = None
    text: str | None = None
    kind: str | None = None
    created_at: int | None = None
    field: str | None = None
    reason: str | None = None
    event_id: str | None = None


def parse_value(value: bytes | bytearray | None, expected_type: str | None, now_ms: int, max_future_ms: int) -> Parsed:
    """Validate one Kafka value with trendcore.events.parse_record; refused records carry field and reason.

    `now_ms` is the Kafka record timestamp (deterministic on re-runs), not the wall clock.
    """
    try:
        record = parse_record(None if value is None else bytes(value), expected_type, now_ms, max_future_ms)
    except InvalidRecord as exc:
        return Parsed(False, field=exc.field, reason=exc.reason)
    common = {"post_id": record.post_id, "user_id": record.user_id, "region": record.region,
              "created_at": record.created_at_ms}
    if isinstance(record, Post):
        return Parsed(True, "post", text=record.text, **common)
    return Parsed(True, "engagement", kind=record.kind, event_id=record.event_id, **common)


def post_tags(text: str | None) -> list[tuple[str, str]]:
    """A post's unique (counting key, display spelling) pairs, via trendcore.hashtags.tag_keys."""
    return tag_keys(text) if text else []
