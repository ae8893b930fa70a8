"""Event-time window arithmetic on integer epoch milliseconds (never local time).

Buckets are identified by their index: minute = ms // 60_000, hour = ms // 3_600_000.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime, timezone

MINUTE_MS = 60_000
HOUR_MS = 3_600_000
DAY_MS = 86_400_000

UNIT_MS = {"m": MINUTE_MS, "h": HOUR_MS, "d": DAY_MS}
"""Bucket units: minute, hour, UTC day."""

EPOCH_DATE = date(1970, 1, 1)

WINDOWS = {"1h": ("m", 60), "24h": ("h", 24)}
"""Sliding windows: 1h = the last 60 minute buckets; 24h = the last 24 hour buckets (the newest partial)."""


def minute_of(ms: int) -> int:
    return ms // MINUTE_MS


def hour_of(ms: int) -> int:
    return ms // HOUR_MS


def day_of(ms: int) -> int:
    return ms // DAY_MS


def unit_ms(unit: str) -> int:
    """Milliseconds of a bucket of `unit` ('m', 'h' or 'd'); any other unit is an error, not an hour."""
    try:
        return UNIT_MS[unit]
    except KeyError:
        raise ValueError(f"unknown bucket unit {unit!r}: expected one of {', '.join(UNIT_MS)}") from None


def bucket_of(ms: int, unit: str) -> int:
    """Bucket index of a timestamp for unit 'm' (minute), 'h' (hour) or 'd' (UTC day)."""
    return ms // unit_ms(unit)


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
    """An hour (2026-11-29T19, 2026-11-29T19:00Z) or a day's first hour (2026-11-29) as an hour index (UTC).

    Raises ValueError, saying what is expected, for anything else or a time that is not on the hour.
    """
    value = text.strip().replace("z", "Z").removesuffix("Z")
    if len(value) == 10:
        value += "T00"
    if len(value) == 13:
        value += ":00"
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{text!r} is not a UTC hour such as 2026-11-29T19:00Z or a day such as 2026-11-29") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    millis = int(moment.timestamp() * 1000)
    if millis % HOUR_MS:
        raise ValueError(f"{text!r} is not on an hour boundary")
    return millis // HOUR_MS


def parse_day(text: str) -> int:
    """A UTC day such as 2026-11-29 as a day index (days since 1970-01-01); ValueError otherwise."""
    try:
        return (date.fromisoformat(text.strip()) - EPOCH_DATE).days
    except ValueError:
        raise ValueError(f"{text!r} is not a UTC day such as 2026-11-29") from None


def day_date(day: int) -> date:
    """The UTC date of a day index."""
    return date.fromordinal(EPOCH_DATE.toordinal() + day)


def hour_of_week(hour: int) -> int:
    """Hour of week of an hour bucket, 0 = Monday 00:00 UTC (1970-01-01 was a Thursday)."""
    return (hour + 72) % 168


def bucket_expire_at_s(bucket: int, unit: str, kept_buckets: int) -> int:
    """Epoch second when a bucket stops being kept (`is_kept` turns false): TTL of its keys."""
    return (bucket + kept_buckets) * unit_ms(unit) // 1000


def source_of(parts: Iterable[str]) -> str:
    """Where an answer over several buckets comes from, given each bucket's source.

    'exact' when every kept bucket is exact, 'approx' when none is, 'mixed' otherwise; 'missing'
    when no bucket is kept. The one rule the materializer and the API both label answers with.
    """
    kinds = set(parts) - {"missing"}
    if not kinds:
        return "missing"
    if kinds == {"exact"}:
        return "exact"
    return "mixed" if "exact" in kinds else "approx"
