"""Whether a partition is rebuilding, and how far the replay has got (issue #24), pure.

A partition positioned with no checkpoint (Redis lost its data, or a first start) but with records to replay, or
with a backlog over `speed.rebuild_lag_records`, replays from where it starts to the log's end as it was then
(the target). Its checkpoint step writes a marker (`part:{p<N>}:replay:{topic}`) with the offset reached, and
deletes it once the target is reached; the merger sums the markers into one `rebuilding` summary that snapshots
and count answers carry, so low numbers during a replay say why.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import orjson
from pydantic import ValidationError

from trendcore.snapshot import Rebuilding, ReplayedPartition


@dataclass(frozen=True, slots=True)
class Replay:
    """A partition's replay: from which offset to which (the log's end when it was positioned)."""

    start: int
    target: int

    def done(self, reached: int) -> bool:
        """True once the next offset stored has reached the target."""
        return reached >= self.target


def replay_of(fresh: bool, start: int, log_end: int, lag_records: int) -> Replay | None:
    """The replay a partition positioned at `start` begins (None: it is not rebuilding): with no checkpoint
    (`fresh`), any record to replay; from a checkpoint, a backlog over `lag_records`."""
    backlog = log_end - start
    if backlog <= 0 or (not fresh and backlog <= lag_records):
        return None
    return Replay(start, log_end)


def marker(topic: str, partition: int, replay: Replay, reached: int) -> bytes:
    """The JSON a checkpoint step stores for a replaying partition (a ReplayedPartition)."""
    return orjson.dumps(ReplayedPartition(topic=topic, partition=partition, from_offset=replay.start,
                                          target_offset=replay.target, reached_offset=reached).model_dump())


def parse_marker(blob: bytes | None) -> ReplayedPartition | None:
    """A stored marker (None when absent or not one: bad data never fails a merge)."""
    if not blob:
        return None
    try:
        return ReplayedPartition.model_validate_json(blob)
    except ValidationError:
        return None


def progress(parts: Iterable[ReplayedPartition]) -> float:
    """The share of the partitions' records to replay that are replayed: records reached over records to reach,
    summed over them (0.0 when there is nothing to replay), within [0, 1]."""
    todo = done = 0
    for part in parts:
        span = max(0, part.target_offset - part.from_offset)
        todo += span
        done += min(span, max(0, part.reached_offset - part.from_offset))
    return done / todo if todo else 0.0


def summary(parts: Iterable[ReplayedPartition | None]) -> Rebuilding | None:
    """The `rebuilding` summary of the markers found (None: no partition replays). A marker whose partition
    reached its target (its deletion not seen yet) is left out."""
    replaying = sorted((p for p in parts if p is not None and p.reached_offset < p.target_offset),
                       key=lambda p: (p.topic, p.partition))
    if not replaying:
        return None
    return Rebuilding(partitions=replaying, progress=round(progress(replaying), 6))
