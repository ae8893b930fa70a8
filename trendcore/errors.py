"""One exception tree for the whole project: catch TrendsError to catch ours."""

from __future__ import annotations


class TrendsError(Exception):
    """Root of every error this project raises on purpose."""


class ConfigError(TrendsError):
    """A setting is missing or inconsistent."""


class InvalidRecord(TrendsError):
    """A record breaks the event contract; `field` names what, the message says why."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}" if field else reason)
        self.field = field
        self.reason = reason


class ServiceError(TrendsError):
    """A dependency (Kafka, Redis, Spark, Airflow) failed; adapters wrap third-party errors in it."""


class StackError(TrendsError):
    """The local stack is in a state we cannot fix ourselves (port held by another process, ...)."""


class EvictingRedis(ServiceError):
    """Redis answers, but under a `maxmemory-policy` that may evict our keys: refused, never worked around."""
