"""The Redis side of partition state (issue #24): a partition's checkpoint step and its load.

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

    def __init__(self, client: redis.Redis, keys: KeySpace, topics: tuple[str, ...] = ()) -> None:
        self.client, self.keys, self.topics = client, keys, topics
        self.script = client.register_script(SCRIPT_PATH.read_text())

    def submit(self, payload: CheckpointPayload) -> None:
        """Run one checkpoint step; StaleBatch or DataLost when refused, ServiceError when Redis fails."""
        with redis_errors("writing a partition checkpoint"):
            reply = self.script(keys=payload.keys(), args=payload.args())
        Checkpointer.outcome(reply)

    def load(self, partition: int, topic: str, now_s: int) -> Loaded:
        """The partition's offsets (of `topic` and of every topic of the store: a posts partition's state also
        moves with its engagements) and live keys, read as of one checkpoint: read again while a checkpoint
        moved an offset meanwhile (a previous owner still writing)."""
        topics = [topic, *(t for t in self.topics if t != topic)]
        offset_keys = [self.keys.part_offset(partition, t) for t in topics]
        for _ in range(_LOAD_ATTEMPTS):
            with redis_errors("loading a partition's state"):
                first = self.client.pipeline(transaction=False)
                for key in offset_keys:
                    first.get(key)
                *before, names = first.zrangebyscore(self.keys.part_index(partition), f"({now_s}", "+inf").execute()
                read = self.client.pipeline(transaction=False)
                for name in [*names, *offset_keys]:
                    read.get(name)
                replies = read.execute()
            values, after = replies[:len(names)], replies[len(names):]
            if before == after:
                offsets = {t: int(v) if v is not None else None for t, v in zip(topics, before, strict=True)}
                return self._loaded(offsets[topic], offsets, [n.decode() for n in names], values)
        raise ServiceError(f"partition {partition}: its offset kept moving while it was loaded")

    def _loaded(self, offset: int | None, offsets: dict[str, int | None], names: list[str],
                values: list[bytes | None]) -> Loaded:
        """Sort the live keys read into state entries, seen-id and event-id chunks (expired meanwhile: left out)."""
        entries, seen, events = [], [], []
        for name, value in zip(names, values, strict=True):
            if value is None:
                continue
            _, kind, coords = self.keys.parse_part(name)
            if kind == "seen":
                seen.append((coords[0], value))
            elif kind == "events":
                events.append((coords[0], value))
            else:
                entries.append((name, value))
        return Loaded(offset, entries, seen, events, offsets)
