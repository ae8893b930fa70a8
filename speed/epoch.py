"""The epoch sentinel: one Redis key whose token changes when Redis lost its data.

Every worker remembers the token it positioned under; a different or missing token means the partitions'
checkpoints may be gone, so the worker positions every assigned partition again (docs/speed.md, "Redis data
loss").
"""

from __future__ import annotations

import uuid

import redis

from adapters.redis import redis_errors


class Epoch:
    """Reads and creates the sentinel of one consumer group."""

    def __init__(self, client: redis.Redis, key: str) -> None:
        self.client, self.key = client, key

    def ensure(self) -> str:
        """The current token, creating one when missing (first start, or Redis lost its data)."""
        with redis_errors("reading the epoch sentinel"):
            self.client.set(self.key, uuid.uuid4().hex, nx=True)
            return self.client.get(self.key).decode()

    def current(self) -> str | None:
        """The current token, None when the sentinel is gone."""
        with redis_errors("reading the epoch sentinel"):
            raw = self.client.get(self.key)
        return raw.decode() if raw else None
