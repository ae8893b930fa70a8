"""The speed layer's refusals: what the atomic step answers instead of applying a micro-batch.

Each is a `TrendsError`; the worker reacts to each in its own way (re-seek, rebuild, rebuild the step).
"""

from __future__ import annotations

from trendcore.errors import TrendsError


class StaleBatch(TrendsError):
    """A step started at an offset other than the one stored: refused, nothing written (a zombie
    worker, or a step that outlived its partition's move to another worker)."""


class DataLost(TrendsError):
    """The epoch sentinel is gone or changed: Redis lost data, the windows must be rebuilt."""


class Duplicates(TrendsError):
    """The step holds posts already applied (their hash exists): nothing was written.

    `post_keys` names them (at most 4,000 per refusal: the script's unpack limit)."""

    def __init__(self, post_keys: list[str]) -> None:
        super().__init__(f"{len(post_keys)} posts already applied")
        self.post_keys = post_keys
