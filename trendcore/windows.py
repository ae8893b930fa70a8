"""Event-time window arithmetic on integer epoch milliseconds (never local time).

Buckets are identified by their index: minute = ms // 60_000, hour = ms // 3_600_000.
"""

from __future__ import annotations

from datetime import datetime, timezone

MINUTE_MS = 60_000
HOUR_MS = 3_600_000
DAY_MS = 86_400_000

WINDOWS = {"1h": ("m", 60), "24h": ("h", 24)}
"""Sliding windows: 1h = the last 60 minute buckets; 24h = the last 24 hour buckets (the newest partial)."""


def minute_of(ms: int) -> int:
    return ms // MINUTE_MS


def hour_of(ms: int) -> int:
    return ms // HOUR_MS


def day_of(ms: int) -> int:
    return ms // DAY_MS


def bucket_of(ms: int, unit: str) -> int:
    """Bucket index of a timestamp for unit 'm' (minute) or 'h' (hour)."""
    return ms // (MINUTE_MS if unit == "m" else HOUR_MS)


def window_buckets(now_ms: int, window: str) -> tuple[str, list[int]]:
    """The unit and bucket indexes (oldest first) that make up a sliding window ending now."""
    unit, size = WINDOWS[window]
    newest = bucket_of(now_ms, unit)
    return unit, list(range(newest - size + 1, newest + 1))


def is_kept(event_ms: int, now_ms: int, unit: str, kept_buckets: int) -> bool:
    """True while the event's bucket is one of the `kept_buckets` newest: late events still count."""
    return bucket_of(now_ms, unit) - bucket_of(event_ms, unit) < kept_buckets


def hour_start(hour: int) -> datetime:
    """The UTC start of an hour bucket."""
    return datetime.fromtimestamp(hour * HOUR_MS / 1000, tz=timezone.utc)


def parse_hour(text: str) -> int:
    """Parse an hour such as 2026-11-29T19 or 2026-11-29T19:00Z into its bucket index (UTC)."""
    value = text.strip().removesuffix("Z").removesuffix("z")
    if len(value) == 13:
        value += ":00"
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp()) * 1000 // HOUR_MS


def hour_of_week(hour: int) -> int:
    """Hour of week of an hour bucket, 0 = Monday 00:00 UTC (1970-01-01 was a Thursday)."""
    return (hour + 72) % 168


def bucket_expire_at_s(bucket: int, unit: str, kept_buckets: int) -> int:
    """Epoch second when a bucket stops being kept (`is_kept` turns false): TTL of its keys."""
    size = MINUTE_MS if unit == "m" else HOUR_MS
    return (bucket + kept_buckets) * size // 1000
