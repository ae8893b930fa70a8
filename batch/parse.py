"""Pure record functions the Spark jobs wrap in UDFs: the same contract and extraction as the speed layer."""

from __future__ import annotations

from trendcore.errors import InvalidRecord
from trendcore.events import Post, parse_record
from trendcore.hashtags import tag_keys

PARSED_FIELDS = (
    "ok", "type", "post_id", "user_id", "region", "text", "kind", "created_at", "field", "reason",
)
"""Order of the tuple `parse_value` returns (the struct fields of the Spark UDF)."""


def parse_value(value: bytes | bytearray | None, expected_type: str | None, now_ms: int, max_future_ms: int) -> tuple:
    """Validate one Kafka value with trendcore.events.parse_record; refused records carry field and reason.

    `now_ms` is the Kafka record timestamp (deterministic on re-runs), not the wall clock.
    """
    try:
        record = parse_record(None if value is None else bytes(value), expected_type, now_ms, max_future_ms)
    except InvalidRecord as exc:
        return (False, None, None, None, None, None, None, None, exc.field, exc.reason)
    if isinstance(record, Post):
        return (True, "post", record.post_id, record.user_id, record.region, record.text, None, record.created_at_ms, None, None)
    return (
        True, "engagement", record.post_id, record.user_id, record.region, None, record.kind, record.created_at_ms, None, None,
    )


def post_tags(text: str | None) -> list[tuple[str, str]]:
    """A post's unique (counting key, display spelling) pairs, via trendcore.hashtags.tag_keys."""
    return tag_keys(text) if text else []

