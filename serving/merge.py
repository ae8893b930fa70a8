"""Pure merge logic: which buckets answer a question, and how exact and approximate segments add up.

No Redis here: `store.py` fills the segments, this module plans them and combines them, so the
rules (exact overrides approximate for a closed bucket, bounds, `source`) are unit-testable.
"""

from __future__ import annotations

from dataclasses import dataclass

from trendcore import windows
from trendcore.cms import error_bound
from trendcore.settings.speed import SpeedSettings
from trendcore.windows import is_kept, unit_ms, window_buckets


@dataclass(frozen=True, slots=True)
class Bucket:
    """One time bucket of a question: unit m/h/d and its epoch index."""

    unit: str
    index: int

    @property
    def start_ms(self) -> int:
        return self.index * unit_ms(self.unit)

    @property
    def end_ms(self) -> int:
        return (self.index + 1) * unit_ms(self.unit)


@dataclass(frozen=True, slots=True)
class Segment:
    """A bucket's answer: `exact` (batch view), `approx` (sketch, with its N) or `missing` (expired)."""

    bucket: Bucket
    source: str
    count: int
    total: int = 0

    def lower(self, eps: float) -> int:
        """The lowest the truth can be: exact is exact; a sketch overcounts by at most eps * N."""
        if self.source != "approx":
            return self.count
        return max(0, self.count - error_bound(eps, self.total))


@dataclass(frozen=True, slots=True)
class Answer:
    """A merged count: estimate (= upper bound), lower bound, overall source and the segments."""

    count: int
    lower_bound: int
    upper_bound: int
    source: str
    segments: list[Segment]


def window_plan(now_ms: int, window: str) -> list[Bucket]:
    """The buckets of a sliding window ending now (1h: 60 minutes, 24h: 24 hours), oldest first."""
    unit, indexes = window_buckets(now_ms, window)
    return [Bucket(unit, i) for i in indexes]


def range_plan(from_hour: int, to_hour: int) -> list[Bucket]:
    """Buckets covering [from_hour, to_hour): whole UTC days as day buckets, the rest as hours."""
    plan: list[Bucket] = []
    hour = from_hour
    while hour < to_hour:
        if hour % 24 == 0 and hour + 24 <= to_hour:
            plan.append(Bucket("d", hour // 24))
            hour += 24
        else:
            plan.append(Bucket("h", hour))
            hour += 1
    return plan


def day_hours(day: int) -> list[Bucket]:
    """The 24 hour buckets of a day, for a day the batch layer has not published."""
    return [Bucket("h", day * 24 + h) for h in range(24)]


def is_closed(bucket: Bucket, now_ms: int) -> bool:
    """True once the bucket has ended: only closed buckets can have exact views."""
    return bucket.end_ms <= now_ms


def source_of(segments: list[Segment]) -> str:
    """The overall source of the segments, by the core's one rule (trendcore.windows.source_of)."""
    return windows.source_of(s.source for s in segments)


def combine(segments: list[Segment], eps: float) -> Answer:
    """Sum the segments; the lower bound subtracts eps * N of the approximate part once."""
    exact = sum(s.count for s in segments if s.source != "approx")
    approx = sum(s.count for s in segments if s.source == "approx")
    approx_n = sum(s.total for s in segments if s.source == "approx")
    lower = exact + max(0, approx - error_bound(eps, approx_n))
    return Answer(exact + approx, lower, exact + approx, source_of(segments), segments)


def regroup(segments: list[Segment], step_ms: int) -> list[tuple[int, list[Segment]]]:
    """Group consecutive segments into steps of `step_ms` (for series), keyed by step start."""
    groups: dict[int, list[Segment]] = {}
    for seg in segments:
        start = seg.bucket.start_ms - seg.bucket.start_ms % step_ms
        groups.setdefault(start, []).append(seg)
    return sorted(groups.items())


def is_retained(bucket: Bucket, now_ms: int, speed: SpeedSettings) -> bool:
    """True while the speed layer still keeps this bucket's sketch: the rule its keys' TTL follows.

    Only minute and hour buckets have sketches; an older bucket's segment is `missing`."""
    kept = {"m": speed.keep_minutes, "h": speed.keep_hours}.get(bucket.unit)
    return kept is not None and is_kept(bucket.start_ms, now_ms, bucket.unit, kept)
