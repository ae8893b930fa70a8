"""Where an owned partition starts (issue #24), pure: no Redis, no Kafka.

On assignment the worker loads each partition's checkpoint (its offset, its state entries, its seen ids)
and seeks to the stored offset; a partition with no stored offset starts at the first offset of the kept
hours (`origins`, a Kafka look-up the worker passes in). A new epoch (Redis lost its data) widens the
positioning to every assigned partition (speed/worker.py `load_and_seek`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from speed.checkpoint import EventIds, Loaded, Owned, SeenIds
from speed.state import PartitionState, StateLimits
from trendcore.cms import SketchShape
from trendcore.keys import KeySpace

TopicPartition = tuple[str, int]


class PartitionSource(Protocol):
    """What positioning reads of a partition (speed.partition_store.PartitionStore in the worker)."""

    def load(self, partition: int, topic: str, now_s: int) -> Loaded: ...


@dataclass(frozen=True, slots=True)
class StateRules:
    """How a loaded partition becomes `Owned`: sketch shape, state bounds, key space, seen-ids bound, which
    topic carries posts (the one with state: an engagements partition's steps go to the posts partition of the
    same number) and the event-ids bound."""

    shape: SketchShape
    limits: StateLimits
    keys: KeySpace
    seen_bound: int
    posts_topic: str
    event_bound: int = 0


def widened(tps: Iterable[TopicPartition], assigned: Iterable[TopicPartition], epoch: str,
            previous: str | None) -> list[TopicPartition]:
    """The partitions to position: `tps`, or every assigned one when the epoch changed since the last
    positioning (the others' memory and positions no longer match what Redis holds)."""
    chosen = set(tps)
    if previous is not None and epoch != previous:
        chosen |= set(assigned)
    return sorted(chosen)


def paired(tps: Iterable[TopicPartition], assigned: Iterable[TopicPartition], topics: tuple[str, str]
           ) -> list[TopicPartition]:
    """`tps` with, for each, the partition of the same number of the other of `topics` (posts, engagements) when
    assigned: a posts partition's state and its engagements partition's offset are checkpointed together, so
    they are positioned together (one loaded without the other could pair a state with an offset it does not
    account for)."""
    chosen, owned = set(tps), set(assigned)
    for topic, partition in list(chosen):
        if topic in topics:
            other = (topics[1] if topic == topics[0] else topics[0], partition)
            if other in owned:
                chosen.add(other)
    return sorted(chosen)


def owned_from(tp: TopicPartition, loaded: Loaded, origin: int | None, rules: StateRules) -> Owned:
    """A partition as its checkpoint left it, or empty at `origin` when it has none."""
    topic, partition = tp
    if loaded.offset is None and origin is None:
        raise ValueError(f"{topic}:{partition} has no stored offset and no origin")
    state = seen = events = None
    if topic == rules.posts_topic:
        state = PartitionState.load(loaded.entries, rules.shape, rules.limits, rules.keys)
        seen = SeenIds(rules.seen_bound)
        seen.load(loaded.seen)
        events = EventIds(rules.event_bound)
        events.load(loaded.events)
    start = loaded.offset if loaded.offset is not None else origin
    return Owned(topic, partition, stored=start, fresh=loaded.offset is None, state=state, seen=seen, events=events)


def position(tps: list[TopicPartition], source: PartitionSource, origins: Callable[[list[TopicPartition]],
             dict[TopicPartition, int]], rules: StateRules, now_ms: int) -> dict[TopicPartition, Owned]:
    """Load each partition and decide its start: the stored offset, else its origin (looked up only for
    partitions with none). An engagements partition positioned with the posts partition of its number takes
    its offset from that load (`Loaded.offsets`), so the pair starts from one checkpoint."""
    loaded = {tp: source.load(tp[1], tp[0], now_ms // 1000) for tp in tps if tp[0] == rules.posts_topic}
    for tp in tps:
        if tp in loaded:
            continue
        posts = loaded.get((rules.posts_topic, tp[1]))
        if posts is not None and tp[0] in posts.offsets:
            loaded[tp] = Loaded(posts.offsets[tp[0]], [], [])
        else:
            loaded[tp] = source.load(tp[1], tp[0], now_ms // 1000)
    missing = [tp for tp, found in loaded.items() if found.offset is None]
    found_origins = origins(missing) if missing else {}
    return {tp: owned_from(tp, loaded[tp], found_origins.get(tp), rules) for tp in tps}


@dataclass(frozen=True, slots=True)
class Cut:
    """How a polled run of records meets what memory holds: records to skip at its start (already taken)
    and offsets the log no longer has (a gap: deleted by retention before they were taken)."""

    skip: int
    gap: int


def cut(next_offset: int, offsets: list[int]) -> Cut:
    """Compare a partition's next offset with the (ascending) offsets of the records polled for it."""
    skip = bisect_left(offsets, next_offset)
    rest = offsets[skip:]
    gap = rest[0] - next_offset if rest and rest[0] > next_offset else 0
    return Cut(skip, gap)


def partition_count_problem(counts: dict[str, int], configured: int) -> str | None:
    """Why these topics' partition counts cannot run (None: they can). The merger merges partitions 0 .. n-1 of
    `kafka.partitions`, and an engagement reaches its post's state only when both topics, keyed by post id, have
    the same count (the same partition number for the same key)."""
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{topic} has {n}" for topic, n in counts.items())
        return (f"the input topics must have the same number of partitions (engagements reach their post's "
                f"partition by key): {listed}")
    found = max(counts.values(), default=0)
    if found > configured:
        return (f"the input topics have {found} partitions but TRENDS_KAFKA__PARTITIONS is {configured}: the merger "
                f"would leave partitions {configured}..{found - 1} out of every answer; set it to {found} for every "
                "worker and the materializer")
    return None
