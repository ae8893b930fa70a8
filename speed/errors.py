"""The speed layer's refusals: what the atomic step answers instead of applying a micro-batch.

Each is a `TrendsError`; the worker reacts to each in its own way (re-seek, rebuild, rebuild the step).
"""

from __future__ import annotations

from trendcore.errors import ConfigError, TrendsError
from trendcore.settings import RedisSettings


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


def require_one_server(redis: RedisSettings, state: str = "lua") -> None:
    """Refuse Redis Cluster for `speed.state=lua`: its atomic step touches keys of many hash slots, so that
    path needs one server or one master (docs/speed.md, "Undeclared keys"). The partition path declares
    every key of a step, all of one slot, and works on a cluster."""
    if redis.mode == "cluster" and state == "lua":
        raise ConfigError("TRENDS_REDIS__MODE=cluster: the speed layer's atomic step touches keys of many hash "
                          "slots and needs one Redis server (TRENDS_REDIS__MODE=single or sentinel); the batch "
                          "publish, the API and TRENDS_SPEED__STATE=partition work on a cluster (docs/speed.md, "
                          "\"Undeclared keys\")")
