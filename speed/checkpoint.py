"""The checkpoint pipeline of `speed.state=partition` (issue #24), pure: no Redis, no Kafka.

A partition a worker owns (`Owned`) gathers its records' increments in a `PartitionState` and the ids of
its posts in `SeenIds`. Every flush interval and on revocation the worker checkpoints it:

- `prepare`: the entries changed since the last checkpoint, the seen-ids chunk, the start offset (what the
  previous checkpoint stored) and the next offset, as one `CheckpointPayload`;
- submit (speed/partition_store.py): speed/checkpoint.lua writes them with the offset in one atomic step,
  or refuses; `outcome` turns its reply into nothing (written), StaleBatch (another owner moved the offset:
  a zombie) or DataLost (the stored offset vanished: Redis lost the partition's keys);
- `settle`: written, the partition's stored offset is the payload's next offset. On a refusal or an
  unknown outcome the worker drops the partition's memory and positions it again from Redis
  (speed/positioning.py): what Redis holds is, by construction, a state and its offset from one step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from speed.errors import DataLost, StaleBatch
from speed.state import Entry, PartitionState
from trendcore.keys import KeySpace

SCRIPT_PATH = Path(__file__).with_name("checkpoint.lua")
KEYS_FIELDS = ("offset_key", "index_key", "changed_key")
"""The script's first KEYS, in order (its `KEYS_FIELDS:` line); then the keys written, then those deleted."""
ARGV_FIELDS = ("start", "fresh", "next_offset", "now_s", "writes")
"""The script's ARGV, in order (its `ARGV_FIELDS:` line); then (value, expire at s) per key written."""


@dataclass(frozen=True, slots=True)
class CheckpointPayload:
    """Everything one checkpoint step sends: the partition's control keys, the offsets, the entries to write
    and the keys to delete. `keys()` and `args()` lay it out as speed/checkpoint.lua reads it."""

    offset_key: str
    index_key: str
    changed_key: str
    start: int
    fresh: bool
    next_offset: int
    now_s: int
    entries: tuple[Entry, ...]
    deletes: tuple[str, ...]

    @property
    def writes(self) -> int:
        """How many keys the step writes (the entries)."""
        return len(self.entries)

    def keys(self) -> list[str]:
        """KEYS: the control keys (KEYS_FIELDS), then the written keys, then the deleted ones."""
        return [*(getattr(self, name) for name in KEYS_FIELDS), *(e.key for e in self.entries), *self.deletes]

    def args(self) -> list[bytes | str | int]:
        """ARGV: ARGV_FIELDS in order (a flag as 1/0), then (value, expire at s) per written key."""
        head = [int(v) if isinstance(v, bool) else v for v in (getattr(self, name) for name in ARGV_FIELDS)]
        return [*head, *(x for e in self.entries for x in (e.value, e.expire_at_s))]


@dataclass(frozen=True, slots=True)
class Loaded:
    """What Redis holds of a partition: its stored next offset (None: none yet), its state entries
    (key, value) and its seen-id chunks (first offset, value)."""

    offset: int | None
    entries: list[tuple[str, bytes]]
    seen: list[tuple[int, bytes]]


class SeenIds:
    """The post ids a partition took lately, to count a re-sent post once without a Redis key per post.

    Checkpointed as chunks (`part:{p<N>}:seen:<first offset>`, one per checkpoint that took new posts);
    the oldest chunks are dropped while the others hold at least `bound` ids, so memory is bounded by
    `bound` plus one chunk. A duplicate of a post older than that is counted again (an overcount the
    batch layer does not make)."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.chunks: deque[tuple[int, list[str]]] = deque()  # (first offset, ids), oldest first
        self.held = 0  # ids in `chunks`
        self.newest_chunk: dict[str, int] = {}  # id -> first offset of the newest chunk holding it
        self.pending: list[str] = []
        self.pending_first: int | None = None

    def known(self, ids: Iterable[str]) -> set[str]:
        """The ids among `ids` taken before (checkpointed or pending)."""
        return {i for i in ids if i in self.newest_chunk}

    def add(self, ids: Sequence[str], first_offset: int) -> None:
        """Remember new ids, taken from records at `first_offset` and after."""
        if not ids or self.bound == 0:
            return
        if self.pending_first is None:
            self.pending_first = first_offset
        self.pending.extend(ids)
        for i in ids:
            self.newest_chunk[i] = self.pending_first

    def checkpoint(self) -> tuple[list[tuple[int, list[str]]], list[int]]:
        """The chunk to write (the pending ids) and the first offsets of the chunks to delete."""
        written: list[tuple[int, list[str]]] = []
        if self.pending_first is not None:
            written.append((self.pending_first, self.pending))
            self.chunks.append((self.pending_first, self.pending))
            self.held += len(self.pending)
            self.pending, self.pending_first = [], None
        dropped = []
        while len(self.chunks) > 1 and self.held - len(self.chunks[0][1]) >= self.bound:
            first, ids = self.chunks.popleft()
            self.held -= len(ids)
            dropped.append(first)
            for i in ids:
                if self.newest_chunk.get(i) == first:
                    del self.newest_chunk[i]
        return written, dropped

    def load(self, chunks: Iterable[tuple[int, bytes]]) -> None:
        """Take checkpointed chunks back (a new owner)."""
        for first, blob in sorted(chunks):
            ids = blob.decode().split("\n") if blob else []
            self.chunks.append((first, ids))
            self.held += len(ids)
            for i in ids:
                self.newest_chunk[i] = first


@dataclass(slots=True)
class Owned:
    """A partition this worker owns: its state (None for engagements: phase 1 keeps none), its seen ids,
    the offset Redis stores for it (`stored`, None when it has none yet: `fresh`) and the next offset of what
    memory holds (`next_offset`)."""

    topic: str
    partition: int
    stored: int
    fresh: bool
    state: PartitionState | None
    seen: SeenIds | None
    next_offset: int = field(default=-1)
    flushed_ms: int = 0

    def __post_init__(self) -> None:
        if self.next_offset < 0:
            self.next_offset = self.stored

    def pending(self) -> bool:
        """True when memory holds records Redis does not."""
        return self.next_offset != self.stored or (self.state is not None and bool(self.state.dirty))


class Checkpointer:
    """Prepares and settles the checkpoints of owned partitions (the step itself runs in Redis)."""

    def __init__(self, keys: KeySpace, seen_ttl_s: int) -> None:
        self.keys, self.seen_ttl_s = keys, seen_ttl_s

    def prepare(self, owned: Owned, now_ms: int) -> CheckpointPayload | None:
        """The next checkpoint of `owned` (None when Redis already holds everything); its state drops what
        is no longer kept and starts a new dirty set."""
        if not owned.pending():
            return None
        p, now_s = owned.partition, now_ms // 1000
        entries: list[Entry] = []
        deletes: list[str] = []
        if owned.state is not None:
            owned.state.expire(now_ms)
            checkpoint = owned.state.checkpoint(p)
            entries += checkpoint.writes
            deletes += checkpoint.deletes
        if owned.seen is not None:
            written, dropped = owned.seen.checkpoint()
            entries += [Entry(self.keys.part_seen(p, first), "\n".join(ids).encode(), now_s + self.seen_ttl_s)
                        for first, ids in written]
            deletes += [self.keys.part_seen(p, first) for first in dropped]
        return CheckpointPayload(
            offset_key=self.keys.part_offset(p, owned.topic), index_key=self.keys.part_index(p),
            changed_key=self.keys.part_changed(p), start=owned.stored, fresh=owned.fresh,
            next_offset=owned.next_offset, now_s=now_s, entries=tuple(entries), deletes=tuple(deletes))

    @staticmethod
    def outcome(reply: Sequence[bytes | str]) -> None:
        """Nothing when the step wrote; StaleBatch or DataLost (speed.errors) when it refused."""
        status = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
        if status == "OK":
            return
        if status == "STALE":
            stored = reply[1].decode() if isinstance(reply[1], bytes) else str(reply[1])
            raise StaleBatch(f"stored offset is {stored}")
        if status == "LOST":
            raise DataLost("the partition's stored offset is gone")
        raise ValueError(f"unexpected checkpoint reply {status!r}")

    @staticmethod
    def settle(owned: Owned, payload: CheckpointPayload, now_ms: int) -> None:
        """A written checkpoint: Redis now stores the payload's next offset."""
        owned.stored, owned.fresh, owned.flushed_ms = payload.next_offset, False, now_ms
