"""The checkpoint pipeline, pure: no Redis, no Kafka (the store that runs the step is passed in).

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

`Checkpointer.step` runs the three in order and says which way it went (`Step`).
"""

from __future__ import annotations

import hashlib
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Protocol

import numpy as np

from speed.errors import DataLost, StaleBatch
from speed.replay import Replay, marker
from speed.state import Entry, PartitionState
from trendcore.keys import KeySpace

SCRIPT_PATH = Path(__file__).with_name("checkpoint.lua")
KEYS_FIELDS = ("offset_key", "index_key", "changed_key", "pair_offset_key", "replay_key", "pair_replay_key")
"""The script's first KEYS, in order (its `KEYS_FIELDS:` line); then the keys written, then those deleted."""
ARGV_FIELDS = ("start", "fresh", "next_offset", "now_s", "pair", "pair_start", "pair_fresh", "pair_next_offset",
               "replay", "pair_replay", "replay_ttl_s", "writes")
"""The script's ARGV, in order (its `ARGV_FIELDS:` line); then (value, expire at s) per key written."""


@dataclass(frozen=True, slots=True)
class CheckpointPayload:
    """Everything one checkpoint step sends: the partition's control keys, the offsets, the entries to write
    and the keys to delete. `keys()` and `args()` lay it out as speed/checkpoint.lua reads it.

    With `pair`, the step also checks and moves the offset of the same partition of the engagements topic
    (`pair_*`): the engagements it took changed the posts partition's top lists, so both offsets move with
    that state in one step. Without it `pair_offset_key` is still declared (the same slot) and ignored.

    `replay` (`pair_replay`): the partition's rebuilding marker (speed/replay.py), set with `replay_ttl_s` at
    `replay_key`, or empty: the key is deleted (not rebuilding, or caught up)."""

    offset_key: str
    index_key: str
    changed_key: str
    pair_offset_key: str
    replay_key: str
    pair_replay_key: str
    start: int
    fresh: bool
    next_offset: int
    now_s: int
    pair: bool
    pair_start: int
    pair_fresh: bool
    pair_next_offset: int
    replay: bytes
    pair_replay: bytes
    replay_ttl_s: int
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
    (key, value), its seen-id chunks (first offset, value), its event-id chunks, and the stored offsets of
    every topic of the partition read with them (`offsets`: one checkpoint's, when the store reads them)."""

    offset: int | None
    entries: list[tuple[str, bytes]]
    seen: list[tuple[int, bytes]]
    events: list[tuple[int, bytes]] = field(default_factory=list)
    offsets: dict[str, int | None] = field(default_factory=dict)


FINGERPRINT_BYTES = 6
"""What a partition remembers of an id: 48 bits (docs/decisions.md, "Seen post ids and event ids as 48-bit
fingerprints")."""
_LOW_48 = (1 << 48) - 1
PACKED = b"\x06"
"""First byte of a chunk of 6-byte fingerprints. A chunk of 8-byte ones (written before) has a length divisible
by 8; 1 + 6k never is (it is odd), so `SeenIds.decode` tells them apart by length."""


def fingerprint(identifier: str) -> int:
    """A 48-bit fingerprint of an id (the low 6 bytes of an 8-byte BLAKE2b, so the 8-byte fingerprints older
    chunks hold match theirs once cut the same way), 6 bytes whatever the id's length or characters. With
    100,000 ids remembered, a new post is taken for a re-sent one with probability 100,000 / 2^48: about once
    in 2.8 billion posts (an undercount of one; the batch layer is exact)."""
    return int.from_bytes(hashlib.blake2b(identifier.encode(), digest_size=8).digest(), "little") & _LOW_48


class SeenIds:
    """The post ids a partition took lately, to count a re-sent post once without a Redis key per post.

    Kept as 48-bit fingerprints (`fingerprint`) and checkpointed as chunks of them, 6 bytes an id
    (`part:{p<N>}:seen:<first offset>`, one per checkpoint that took new posts); the oldest chunks are dropped
    while the others hold at least `bound` ids, so memory is bounded by `bound` plus one chunk. A duplicate of a
    post older than that is counted again (an overcount the batch layer does not make)."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.chunks: deque[tuple[int, list[int]]] = deque()  # (first offset, fingerprints), oldest first
        self.held = 0  # fingerprints in `chunks`
        self.newest_chunk: dict[int, int] = {}  # fingerprint -> first offset of the newest chunk holding it
        self.pending: list[int] = []
        self.pending_first: int | None = None
        self.asked: dict[str, int] = {}  # the last `known` call's fingerprints: `add` takes them, not hashing twice

    def known(self, ids: Iterable[str]) -> set[str]:
        """The ids among `ids` taken before (checkpointed or pending)."""
        self.asked = {i: fingerprint(i) for i in ids}
        return {i for i, f in self.asked.items() if f in self.newest_chunk}

    def add(self, ids: Sequence[str], first_offset: int) -> None:
        """Remember new ids, taken from records at `first_offset` and after."""
        asked, self.asked = self.asked, {}
        if not ids or self.bound == 0:
            return
        if self.pending_first is None:
            self.pending_first = first_offset
        prints = [asked.get(i) or fingerprint(i) for i in ids]
        self.pending.extend(prints)
        for f in prints:
            self.newest_chunk[f] = self.pending_first

    def checkpoint(self) -> tuple[list[tuple[int, list[int]]], list[int]]:
        """The chunk to write (the pending fingerprints) and the first offsets of the chunks to delete."""
        written: list[tuple[int, list[int]]] = []
        if self.pending_first is not None:
            written.append((self.pending_first, self.pending))
            self.chunks.append((self.pending_first, self.pending))
            self.held += len(self.pending)
            self.pending, self.pending_first = [], None
        dropped = []
        while len(self.chunks) > 1 and self.held - len(self.chunks[0][1]) >= self.bound:
            first, prints = self.chunks.popleft()
            self.held -= len(prints)
            dropped.append(first)
            for f in prints:
                if self.newest_chunk.get(f) == first:
                    del self.newest_chunk[f]
        return written, dropped

    @staticmethod
    def encode(prints: list[int]) -> bytes:
        """A chunk's value: PACKED, then the fingerprints, 6 bytes each, little-endian."""
        rows = np.asarray(prints, dtype="<u8").view(np.uint8).reshape(-1, 8)
        return PACKED + rows[:, :FINGERPRINT_BYTES].tobytes()

    @staticmethod
    def decode(blob: bytes) -> list[int]:
        """The fingerprints of a chunk's value: 6-byte ones after PACKED, or a chunk of 8-byte ones cut to 48 bits."""
        if not blob:
            return []
        if len(blob) % 8 == 0:
            return (np.frombuffer(blob, dtype="<u8") & np.uint64(_LOW_48)).tolist()
        rows = np.zeros((len(blob) // FINGERPRINT_BYTES, 8), dtype=np.uint8)
        rows[:, :FINGERPRINT_BYTES] = np.frombuffer(blob, dtype=np.uint8, offset=1).reshape(-1, FINGERPRINT_BYTES)
        return rows.view("<u8").ravel().tolist()

    def load(self, chunks: Iterable[tuple[int, bytes]]) -> None:
        """Take checkpointed chunks back (a new owner)."""
        for first, blob in sorted(chunks):
            prints = self.decode(blob)
            self.chunks.append((first, prints))
            self.held += len(prints)
            for f in prints:
                self.newest_chunk[f] = first


class EventIds(SeenIds):
    """The engagement event ids (state.event_key: post id and event id) a partition added lately, so that a
    copy adds nothing: SeenIds' fingerprint chunks (`part:{p<N>}:events:<first engagement offset>`). Bounded by
    `speed.seen_event_ids`; a copy older than that, of a post still held, adds its weight again."""


@dataclass(slots=True)
class Owned:
    """A partition this worker owns: its state (the posts topic's; None for engagements, whose steps go to the
    state of the posts partition of the same number), its seen post ids and event ids, the offset Redis stores
    for it (`stored`, None when it has none yet: `fresh`) and the next offset of what memory holds
    (`next_offset`); `replay` while it rebuilds (speed/replay.py: positioned with no checkpoint, or far behind)."""

    topic: str
    partition: int
    stored: int
    fresh: bool
    state: PartitionState | None
    seen: SeenIds | None
    next_offset: int = field(default=-1)
    flushed_ms: int = 0
    events: EventIds | None = None
    replay: Replay | None = None

    def __post_init__(self) -> None:
        if self.next_offset < 0:
            self.next_offset = self.stored

    def flush_due(self, now_ms: int, every_ms: float) -> bool:
        """Whether a flush boundary (a multiple of `every_ms` on the wall clock) passed since the last checkpoint:
        every worker's partitions then checkpoint just after the same instants, which the merger's rounds follow
        (`speed.materialize_lag_s`), instead of each at its own phase."""
        return now_ms // every_ms != self.flushed_ms // every_ms

    def pending(self) -> bool:
        """True when memory holds records Redis does not, or Redis holds sketches in chunks, or lists and author
        sketches plain, that may stop changing (a quiet partition's checkpoints write them whole and packed:
        PartitionState.chunked, PartitionState.unpacked)."""
        state = self.state
        return self.next_offset != self.stored or (state is not None and bool(state.dirty or state.chunked
                                                                               or state.unpacked))


class Submits(Protocol):
    """What runs a checkpoint step (speed.partition_store.PartitionStore in the worker): returns when written,
    raises StaleBatch or DataLost when refused, ServiceError when the outcome is unknown."""

    def submit(self, payload: CheckpointPayload) -> None: ...


class Outcome(Enum):
    """How one checkpoint went."""

    NOTHING = "nothing"  # Redis already held everything: no step ran
    WRITTEN = "written"
    REFUSED = "refused"  # another owner moved the offset (a zombie's checkpoint): nothing written


@dataclass(frozen=True, slots=True)
class Step:
    """One checkpoint's outcome, its payload (None: NOTHING), the refusal's reason and the step's seconds."""

    outcome: Outcome
    payload: CheckpointPayload | None = None
    reason: str = ""
    seconds: float = 0.0


class Checkpointer:
    """Prepares, submits and settles the checkpoints of owned partitions (the step itself runs in Redis)."""

    def __init__(self, keys: KeySpace, seen_ttl_s: int, replay_ttl_s: int = 120) -> None:
        self.keys, self.seen_ttl_s, self.replay_ttl_s = keys, seen_ttl_s, replay_ttl_s

    def prepare(self, owned: Owned, now_ms: int, pair: Owned | None = None) -> CheckpointPayload | None:
        """The next checkpoint of `owned` and, when given, its `pair` (the engagements partition of the same
        number, whose steps changed `owned`'s state); None when Redis already holds everything. The state
        drops what is no longer kept and starts a new dirty set."""
        if not owned.pending() and not (pair is not None and pair.pending()):
            return None
        p, now_s = owned.partition, now_ms // 1000
        entries: list[Entry] = []
        deletes: list[str] = []
        if owned.state is not None:
            owned.state.expire(now_ms)
            checkpoint = owned.state.checkpoint(p)
            entries += checkpoint.writes
            deletes += checkpoint.deletes
        for ids, key in ((owned.seen, self.keys.part_seen), (owned.events, self.keys.part_events)):
            if ids is not None:
                written, dropped = ids.checkpoint()
                expire_at = now_s + self.seen_ttl_s
                entries += [Entry(key(p, first), ids.encode(chunk), expire_at) for first, chunk in written]
                deletes += [key(p, first) for first in dropped]
        other = pair if pair is not None else owned
        return CheckpointPayload(
            offset_key=self.keys.part_offset(p, owned.topic), index_key=self.keys.part_index(p),
            changed_key=self.keys.part_changed(p), pair_offset_key=self.keys.part_offset(p, other.topic),
            replay_key=self.keys.part_replay(p, owned.topic), pair_replay_key=self.keys.part_replay(p, other.topic),
            start=owned.stored, fresh=owned.fresh, next_offset=owned.next_offset, now_s=now_s,
            pair=pair is not None, pair_start=other.stored, pair_fresh=other.fresh,
            pair_next_offset=other.next_offset, replay=self.replay_marker(owned),
            pair_replay=self.replay_marker(other), replay_ttl_s=self.replay_ttl_s, entries=tuple(entries),
            deletes=tuple(deletes))

    def step(self, store: Submits, owned: Owned, now_ms: Callable[[], int], pair: Owned | None = None) -> Step:
        """Prepare, submit and settle one checkpoint of `owned` (with its `pair`). A refusal leaves both unsettled
        for the caller to drop; DataLost or an unknown outcome propagate: `prepare` already took the changes, so
        memory no longer matches Redis either way and the caller drops it too."""
        payload = self.prepare(owned, now_ms(), pair)
        if payload is None:
            return Step(Outcome.NOTHING)
        started = time.perf_counter()
        try:
            store.submit(payload)
        except StaleBatch as exc:
            return Step(Outcome.REFUSED, payload, str(exc), time.perf_counter() - started)
        seconds = time.perf_counter() - started
        self.settle(owned, payload, now_ms(), pair)
        return Step(Outcome.WRITTEN, payload, seconds=seconds)

    @staticmethod
    def replay_marker(owned: Owned) -> bytes:
        """The rebuilding marker a checkpoint of `owned` stores: its replay with the offset it reaches, or empty
        (the key deleted) when it is not rebuilding or this checkpoint reaches the target."""
        replay = owned.replay
        if replay is None or replay.done(owned.next_offset):
            return b""
        return marker(owned.topic, owned.partition, replay, owned.next_offset)

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
    def settle(owned: Owned, payload: CheckpointPayload, now_ms: int, pair: Owned | None = None) -> None:
        """A written checkpoint: Redis now stores the payload's next offsets (its pair's too); a replay whose
        target it reached is over (its marker deleted by the step)."""
        owned.stored, owned.fresh, owned.flushed_ms = payload.next_offset, False, now_ms
        if pair is not None and payload.pair:
            pair.stored, pair.fresh, pair.flushed_ms = payload.pair_next_offset, False, now_ms
        for one in (owned, pair if payload.pair else None):
            if one is not None and one.replay is not None and one.replay.done(one.stored):
                one.replay = None
