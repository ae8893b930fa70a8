"""Trend scoring: rise against the usual level, and rank change between snapshots."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def rise_score(count: int, baseline: float, a: float = 5.0, b: float = 10.0) -> float:
    """(count + a) / (baseline + b): smoothed so tiny tags with a tiny baseline do not dominate."""
    return (count + a) / (baseline + b)


def rank_changes(previous: Mapping[str, int], current: Sequence[str]) -> list[int | None]:
    """Positive when a tag moved up since the previous snapshot; None when it is new to the list."""
    changes: list[int | None] = []
    for rank, tag in enumerate(current, start=1):
        before = previous.get(tag)
        changes.append(None if before is None else before - rank)
    return changes
