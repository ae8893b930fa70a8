"""The Redis side of `speed.state=partition` (issue #24): a partition's checkpoint step and its load.

Every key named here carries the partition's hash tag, so each call touches one slot (a Redis Cluster
serves it from the slot's master); nothing SCANs: a partition's live keys are listed in its index
(`KeySpace.part_index`), which the checkpoint step itself keeps.
"""

from __future__ import annotations

import redis

from adapters.redis import redis_errors
from speed.checkpoint import SCRIPT_PATH, Checkpointer, CheckpointPayload, Loaded
from trendcore.errors import ServiceError
from trendcore.keys import KeySpace

_LOAD_ATTEMPTS = 5


class PartitionStore:
    """Runs checkpoint steps and loads partitions, for one key space."""

    def __init__(self, client: redis.Redis, keys: KeySpace) -> None:
        self.client, self.keys = client, keys
        self.script = client.register_script(SCRIPT_PATH.read_text())

    def submit(self, payload: CheckpointPayload) -> None:
        """Run one checkpoint step; StaleBatch or DataLost when refused, ServiceError when Redis fails."""
        with redis_errors("writing a partition checkpoint"):
            reply = self.script(keys=payload.keys(), args=payload.args())
        Checkpointer.outcome(reply)

    def load(self, partition: int, topic: str, now_s: int) -> Loaded:
        """The partition's offset and live keys, read as of one checkpoint: read again while a checkpoint
        moved the offset meanwhile (a previous owner still writing)."""
        offset_key = self.keys.part_offset(partition, topic)
        for _ in range(_LOAD_ATTEMPTS):
            with redis_errors("loading a partition's state"):
                before, names = (self.client.pipeline(transaction=False).get(offset_key)
                                 .zrangebyscore(self.keys.part_index(partition), f"({now_s}", "+inf").execute())
                read = self.client.pipeline(transaction=False)
                for name in names:
                    read.get(name)
                read.get(offset_key)
                *values, after = read.execute()
            if before == after:
                return self._loaded(before, [n.decode() for n in names], values)
        raise ServiceError(f"partition {partition}: its offset kept moving while it was loaded")

    def _loaded(self, offset: bytes | None, names: list[str], values: list[bytes | None]) -> Loaded:
        """Sort the live keys read into state entries and seen-id chunks (expired meanwhile: left out)."""
        entries, seen = [], []
        for name, value in zip(names, values, strict=True):
            if value is None:
                continue
            _, kind, coords = self.keys.parse_part(name)
            if kind == "seen":
                seen.append((coords[0], value))
            else:
                entries.append((name, value))
        return Loaded(int(offset) if offset is not None else None, entries, seen)
