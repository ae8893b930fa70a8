"""Micro-batch pre-aggregation (pure): raw records of one partition -> increments and dead letters.

Zipf-distributed tags repeat a lot inside a batch, so each (region, bucket, tag) becomes one
counter increment of the summed count instead of one per mention.
"""

from __future__ import annotations

import base64
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from trendcore.errors import InvalidRecord
from trendcore.events import Engagement, Post, parse_record
from trendcore.hashtags import counting_keys
from trendcore.regions import WORLDWIDE
from trendcore.windows import HOUR_MS, MINUTE_MS, bucket_of

# A dead letter must fit the producer's default record limit (librdkafka message.max.bytes,
# 1,000,000 bytes) whatever it carries: JSON escapes a control byte as 6 bytes and base64 grows
# 4/3, so at most 128 KiB of the raw value is kept (786,432 bytes escaped at worst), and at most
# 1,024 bytes of the key and characters of the reason and field (6 KiB each at worst).
MAX_DEAD_VALUE_BYTES = 128 * 1024
MAX_DEAD_TEXT = 1024


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A refused record and why; `value` is the raw bytes as read from Kafka (None: a tombstone)."""

    offset: int
    key: bytes | None
    value: bytes | None
    field: str
    reason: str

    def document(self, topic: str, partition: int, now_ms: int) -> dict:
        """The dead-letter record: reason, source topic/partition/offset and the raw value (base64 if
        not UTF-8; cut to MAX_DEAD_VALUE_BYTES with `truncated` and `value_bytes` when bigger)."""
        key = (self.key or b"")[:MAX_DEAD_TEXT].decode("utf-8", "replace")
        doc = {"reason": self.reason[:MAX_DEAD_TEXT], "field": self.field[:MAX_DEAD_TEXT], "topic": topic,
               "partition": partition, "offset": self.offset, "key": key, "at_ms": now_ms}
        if self.value is None:
            return doc | {"value": None, "tombstone": True}
        value = self.value
        if len(value) > MAX_DEAD_VALUE_BYTES:
            doc |= {"truncated": True, "value_bytes": len(value)}
            value = value[:MAX_DEAD_VALUE_BYTES]
        try:
            doc["value"] = value.decode("utf-8")
        except UnicodeDecodeError as exc:
            if doc.get("truncated") and exc.reason == "unexpected end of data":  # the cut split a character
                doc["value"] = value[:exc.start].decode("utf-8")
            else:
                doc["value_b64"] = base64.b64encode(value).decode("ascii")
        return doc


@dataclass
class Parsed:
    """One partition's micro-batch after validation: offsets [start, next), good records, dead letters."""

    start: int
    next: int
    posts: list[Post] = field(default_factory=list)
    engagements: list[Engagement] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)
    duplicates: int = 0


def parse_batch(
    records: Iterable[tuple[int, bytes | None, bytes | None]], expected_type: str, now_ms: int, max_future_ms: int
) -> Parsed:
    """Validate (offset, key, value) records in offset order; posts are deduplicated within the batch."""
    parsed: Parsed | None = None
    seen: set[str] = set()
    offset = -1
    for offset, key, value in records:
        if parsed is None:
            parsed = Parsed(offset, offset + 1)
            posts, engagements, dead = parsed.posts, parsed.engagements, parsed.dead
        try:
            record = parse_record(value, expected_type, now_ms, max_future_ms)
        except InvalidRecord as exc:
            dead.append(DeadLetter(offset, key, value, exc.field, str(exc)))
            continue
        if type(record) is Post:
            if record.post_id in seen:
                parsed.duplicates += 1
            else:
                seen.add(record.post_id)
                posts.append(record)
        else:
            engagements.append(record)
    if parsed is None:
        raise ValueError("empty batch")
    parsed.next = offset + 1
    return parsed


@dataclass
class Increments:
    """Everything one batch adds, grouped by Redis key coordinates (no key names here)."""

    sketches: dict[tuple[str, str, int], Counter] = field(default_factory=lambda: defaultdict(Counter))
    # the posts applied, with their tags' counting keys: the state takes authors and newest posts from them,
    # for the tags among its candidates only (speed.state.PartitionState.add)
    posts: list[tuple[Post, list[str]]] = field(default_factory=list)
    engagement: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    # per post id, the weight of each distinct event_id (Redis adds it only the first time it sees the id)
    engagement_ids: dict[str, dict[str, float]] = field(default_factory=dict)
    mentions: int = 0
    duplicates: int = 0
    late_minute: int = 0
    late_dropped: int = 0


def aggregate_posts(
    posts: Iterable[Post], known: set[str] | frozenset[str], now_ms: int, keep_minutes: int, keep_hours: int
) -> Increments:
    """Pre-aggregate posts not already applied (`known` post ids are duplicates) by event-time bucket.

    A mention counts in its minute while that minute is kept and in its hour while that hour is
    kept; a mention too late for the minute sketches is counted in `late_minute`, one too late for
    both in `late_dropped` (the batch layer counts it).

    The loop inlines `trendcore.windows.bucket_of` and `is_kept` (a call each per post would cost
    more than the arithmetic); they are its oracle, and tests/unit/test_speed_aggregate.py holds the
    sketches it builds to a per-mention definition written with them.
    """
    inc = Increments()
    minutes: dict[tuple[str, int], Counter] = defaultdict(Counter)  # (region, minute): minute and hour kept
    hours: dict[tuple[str, int], Counter] = defaultdict(Counter)  # (region, hour): too late for the minute
    minute_only: dict[tuple[str, int], Counter] = defaultdict(Counter)  # only with keep_minutes > keep_hours hours
    now_minute, now_hour = now_ms // MINUTE_MS, now_ms // HOUR_MS
    for post in posts:
        if post.post_id in known:
            inc.duplicates += 1
            continue
        created = post.created_at_ms
        minute, hour = created // MINUTE_MS, created // HOUR_MS
        minute_kept, hour_kept = now_minute - minute < keep_minutes, now_hour - hour < keep_hours
        tags = counting_keys(post.text)
        if not (minute_kept or hour_kept):
            inc.late_dropped += len(tags)
            continue
        inc.posts.append((post, tags))
        if not tags:
            continue
        if minute_kept and hour_kept:
            minutes[(post.region, minute)].update(tags)  # C-level counting
        else:
            inc.late_minute += len(tags)
            (hours if hour_kept else minute_only)[(post.region, hour if hour_kept else minute)].update(tags)
        inc.mentions += len(tags)
    _spread(inc.sketches, minutes, hours, minute_only)
    return inc


def _spread(sketches: dict, minutes: dict[tuple[str, int], Counter], hours: dict[tuple[str, int], Counter],
            minute_only: dict[tuple[str, int], Counter]) -> None:
    """Add each (region, minute) counter to its region and worldwide minute and hour sketches, each
    late (region, hour) counter to its hour sketches, and each minute-only counter to its minute
    sketches: Counter.update per distinct tag and bucket, not per mention."""
    for (region, minute), counter in minutes.items():
        hour = bucket_of(minute * MINUTE_MS, "h")
        for key in ((region, "m", minute), (WORLDWIDE, "m", minute), (region, "h", hour), (WORLDWIDE, "h", hour)):
            sketches[key].update(counter)
    for (region, hour), counter in hours.items():
        for key in ((region, "h", hour), (WORLDWIDE, "h", hour)):
            sketches[key].update(counter)
    for (region, minute), counter in minute_only.items():
        for key in ((region, "m", minute), (WORLDWIDE, "m", minute)):
            sketches[key].update(counter)


def step_increments(kind: str, parsed: Parsed, known: frozenset[str], now_ms: int, keep_minutes: int,
                    keep_hours: int, weights: dict[str, float]) -> Increments:
    """What one parsed step adds: its posts pre-aggregated (`known` ids left out, the batch's own
    duplicates counted) or, for an engagements step, the summed weight per post."""
    if kind == "post":
        inc = aggregate_posts(parsed.posts, known, now_ms, keep_minutes, keep_hours)
        inc.duplicates += parsed.duplicates
        return inc
    total, by_id = aggregate_engagements(parsed.engagements, weights)
    return Increments(engagement=total, engagement_ids=by_id)


def aggregate_engagements(
    engagements: Iterable[Engagement], weights: dict[str, float]
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Summed weight per post id of the engagements without an event_id, and per post id the weight of each
    distinct event_id (a copy within the step is dropped here, one from an earlier step by the Redis step)."""
    total: dict[str, float] = defaultdict(float)
    by_id: dict[str, dict[str, float]] = defaultdict(dict)
    for eng in engagements:
        weight = weights.get(eng.kind, 0.0)
        if eng.event_id is None:
            total[eng.post_id] += weight
        else:
            by_id[eng.post_id].setdefault(eng.event_id, weight)
    return dict(total), dict(by_id)
