"""Bounded candidate tags of a bucket (pure): tag -> estimate, at most `limit`, best first.

Best means the highest estimate, then the smallest tag: every trim, ranking and merge uses this one
order, so the same increments always keep the same candidates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import itemgetter

import numpy as np


def ranked(candidates: Mapping[str, int], limit: int) -> list[tuple[str, int]]:
    """The `limit` best (tag, estimate) pairs, best first (two stable sorts with C keys: by tag, then by
    estimate descending, which keeps equal estimates in tag order)."""
    pairs = sorted(candidates.items())
    pairs.sort(key=itemgetter(1), reverse=True)
    return pairs[:limit]


def offer(candidates: dict[str, int], tags: Sequence[str] | np.ndarray, estimates: np.ndarray,
          limit: int) -> list[str]:
    """Give `tags` their new `estimates` (never lower than before) and trim to the `limit` best;
    return the tags dropped. A full set admits only estimates at or above its lowest (in numpy: a
    step's long tail of tags never reaches Python)."""
    if len(candidates) >= limit and len(estimates):
        above = np.flatnonzero(estimates >= min(candidates.values()))
        tags, estimates = [tags[i] for i in above.tolist()], estimates[above]
    candidates.update(zip(tags, estimates.tolist(), strict=True))
    return trim(candidates, limit)


def trim(candidates: dict[str, int], limit: int) -> list[str]:
    """Drop all but the `limit` best candidates in place; return the dropped tags."""
    excess = len(candidates) - limit
    if excess <= 0:
        return []
    names = list(candidates)
    estimates = np.fromiter(candidates.values(), dtype=np.int64, count=len(names))
    cut = np.partition(estimates, excess)[excess]  # the lowest estimate that stays
    dropped = [names[i] for i in np.flatnonzero(estimates < cut).tolist()]
    ties = sorted((names[i] for i in np.flatnonzero(estimates == cut).tolist()), reverse=True)
    dropped += ties[:excess - len(dropped)]  # among equal estimates the largest tags go
    for tag in dropped:
        del candidates[tag]
    return dropped
