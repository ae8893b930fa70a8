"""The speed layer's refusals: what a checkpoint step answers instead of writing.

Each is a `TrendsError`; the worker reacts to each in its own way (position again, rebuild).
"""

from __future__ import annotations

from trendcore.errors import TrendsError


class StaleBatch(TrendsError):
    """A step started at an offset other than the one stored: refused, nothing written (a zombie
    worker, or a step that outlived its partition's move to another worker)."""


class DataLost(TrendsError):
    """The epoch sentinel is gone or changed: Redis lost data, the windows must be rebuilt."""
