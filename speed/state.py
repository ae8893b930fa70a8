"""One partition's open buckets in the worker's memory (issue #24), checkpointed as key/value pairs.

The worker adds each step's increments here instead of sending them to Redis record by record; every
flush interval it writes `checkpoint()` (the changed entries only) with the partition's next offset in
one atomic step, and after a restart or a rebalance `PartitionState.load` rebuilds the state from those
keys. Every key carries the partition's hash tag `{p<N>}` (trendcore.keys `part_*`). Pure: no I/O.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

import numpy as np

from speed import candidates as cands
from speed.aggregate import Increments
from speed.cells import CellCache, step_cells
from speed.newest import NewestPosts
from speed.posts import PostBook, TopPosts
from speed.state_codec import decode_meta, encode_meta
from trendcore import hll, packing, sketch_blob
from trendcore.cms import SketchShape
from trendcore.events import Post
from trendcore.hll import HyperLogLog, hash_values, registers_of
from trendcore.keys import KeySpace
from trendcore.regions import WORLDWIDE
from trendcore.settings.speed import SpeedSettings
from trendcore.windows import HOUR_MS, bucket_expire_at_s, hour_of

BucketKey = tuple[str, str, int]
"""(region, unit, bucket)."""
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class StateLimits:
    """What bounds a partition's state: buckets kept, candidates per bucket, posts per tag and hour."""

    keep_minutes: int
    keep_hours: int
    candidates: int
    posts_per_tag: int
    author_precision: int = 12  # 4 KiB an author sketch, 1.6 % standard error

    @classmethod
    def of(cls, speed: SpeedSettings) -> StateLimits:
        return cls(speed.keep_minutes, speed.keep_hours, speed.candidates, speed.posts_per_tag)

    def expire_at_s(self, unit: str, bucket: int) -> int:
        """When a bucket of `unit` ('m' or 'h') stops being kept: its keys' expiry and `expire`'s rule."""
        return bucket_expire_at_s(bucket, unit, self.keep_minutes if unit == "m" else self.keep_hours)


@dataclass(slots=True)
class Bucket:
    """One (region, unit, bucket): its counters, N, and candidate estimates (at most `candidates`)."""

    counters: np.ndarray
    total: int = 0
    candidates: dict[str, int] = field(default_factory=dict)
    pending: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    """(cells, amounts) added since the last checkpoint: what its next chunk appends."""
    stored: int | None = None
    """Bytes Redis holds of the sketch; None when the next checkpoint must write it whole (new, or not
    appendable: sketch_blob.appendable)."""
    whole: int = 0
    """Bytes of its last whole write: chunks are appended while the stored value stays within twice that."""


APPEND = 0
"""An Entry's `expire_at_s` when its value is a chunk appended to its key (which keeps its own expiry)."""
COMPACT_IDLE = 60
"""Checkpoints a bucket with chunks stays unchanged before its sketch is written whole: once a closed minute
or hour is past its late records (a bucket touched every few seconds would cost a whole write each time)."""


class Entry(NamedTuple):
    """One key a checkpoint writes, with the epoch second it expires at (its bucket's end of keeping), or
    APPEND: the value is appended to the key (a sketch's chunk of changed cells)."""

    key: str
    value: bytes
    expire_at_s: int


def _went_quiet(quiet: dict[V, int], changed: Callable[[V], bool]) -> list[V]:
    """The keys of `quiet` (-> checkpoints since each last changed) unchanged for COMPACT_IDLE checkpoints with
    this one; the others not `changed` now count one more. The caller writes the returned ones and drops them."""
    idle = []
    for key, count in quiet.items():
        if changed(key):
            continue
        if count + 1 >= COMPACT_IDLE:
            idle.append(key)
        else:
            quiet[key] = count + 1
    return idle


def written(entry: Entry, held: bytes | None) -> bytes | None:
    """What a key holds after a checkpoint step wrote `entry` over `held` (speed/checkpoint.lua's rule, for
    stand-ins of Redis): the value, or `held` with the chunk appended (nothing when the key is gone)."""
    if entry.expire_at_s != APPEND:
        return entry.value
    return None if held is None else held + entry.value


@dataclass(frozen=True, slots=True)
class Engaged:
    """What an engagements step did to a partition: engaged posts it did not hold (`unseen`: left to the batch
    layer) and the event ids it added (to remember: a copy adds nothing)."""

    unseen: int
    events: list[str]


def event_key(post_id: str, event_id: str) -> str:
    """How an engagement's event id is remembered: per post (post id, NUL, event id)."""
    return f"{post_id}\x00{event_id}"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What changed in a partition since its last checkpoint: keys to write and keys to delete (author
    sketches, newest-post and top-post lists of tags that left the candidates)."""

    partition: int
    writes: tuple[Entry, ...]
    deletes: tuple[str, ...]


class PartitionState:
    """One partition's open buckets: sketches, totals, candidates, author sketches, newest and top posts.

    Bounds: a bucket is kept while `trendcore.windows.is_kept` holds for it (`expire`), with at most
    `candidates` candidate tags. Author sketches and newest-post lists exist ONLY for tags among the
    partition's worldwide candidates of their hour (the same rule for both: `_of_candidates`): one
    starts at the step the tag enters those candidates and is deleted (at the next checkpoint) when it
    leaves them. So at most `candidates * keep_hours` of each: author sketches of 2**author_precision
    bytes (53 MB at the defaults) and lists of at most `posts_per_tag` posts (speed.newest.NewestPosts).
    What is missed: a tag's authors and posts are counted from the step it (last) entered the
    candidates; those of its earlier mentions are missed, at most as many as its estimate was then,
    which is no more than the lowest candidate's. A tail tag, never a candidate of the partition, has
    neither: the speed layer answers its distinct authors, top posts and newest posts of that hour
    empty (docs/redis-layout.md, "Partition state"). A post's body (text, region, user id, created at)
    lives in the entries of the lists holding it, so it is kept exactly while one does (`book`,
    speed.posts). Top-posts lists follow the same rule: an engagement (`engage`) reaches a post only while
    some list holds it, and its score goes to the top-posts lists of the post's candidate tags.
    """

    def __init__(self, shape: SketchShape, limits: StateLimits, keys: KeySpace) -> None:
        self.shape, self.limits, self.keys = shape, limits, keys
        self.buckets: dict[BucketKey, Bucket] = {}
        self.authors: dict[int, dict[str, HyperLogLog]] = {}  # hour -> tag -> sketch
        self.book = PostBook()  # the posts some list holds: bodies, tags, engagement scores
        self.posts = NewestPosts(limits.posts_per_tag, self.book)
        self.top = TopPosts(limits.posts_per_tag, self.book)
        # changed since the last checkpoint: ("bucket", region, unit, bucket) | ("authors"|"posts"|"top", tag, hour);
        # a dict used as a set in insertion order, so the same increments give the same checkpoint order
        self.dirty: dict[tuple, None] = {}
        # buckets whose stored sketch has chunks appended -> checkpoints since it last changed: written whole
        # after COMPACT_IDLE of them, since Redis allocates an appended string twice its length (sdsMakeRoomFor)
        # and a closed bucket is kept for hours
        self.chunked: dict[BucketKey, int] = {}
        # lists and author sketches Redis holds plain -> checkpoints since it last changed: written packed after
        # COMPACT_IDLE of them (one that changes every second would pay zlib at every checkpoint; a closed hour's
        # is kept for hours)
        self.unpacked: dict[tuple[str, str, int], int] = {}

    def add(self, inc: Increments, cells: CellCache) -> None:
        """Apply one step's increments: sketches and candidates first (author sketches and newest posts
        follow them, for the candidates only)."""
        self._add_sketches(inc.sketches, cells)
        authors, new_posts, found = self._of_candidates(inc.posts)
        self._add_authors(authors)
        changed = self.posts.add(new_posts, found)
        self.dirty.update(dict.fromkeys(("posts", tag, hour) for tag, hour in changed))

    def engage(self, summed: dict[str, float], named: dict[str, dict[str, float]], known: set[str]) -> Engaged:
        """Add a step's engagements (speed.aggregate.aggregate_engagements: the summed weight per post of those
        without an event id, the weight per event id of the others) to the posts this partition holds; event
        ids in `known` (event_key) were added before and add nothing. A held post's score is offered to the
        top-posts list of each of its tags among its hour's worldwide candidates."""
        unseen, events = 0, []
        for post_id in [*summed, *(p for p in named if p not in summed)]:
            held = self.book.held.get(post_id)
            if held is None:
                unseen += 1
                continue
            weight = summed.get(post_id, 0.0)
            for event_id, each in named.get(post_id, {}).items():
                key = event_key(post_id, event_id)
                if key not in known:
                    events.append(key)
                    weight += each
            if weight:
                held.score += weight
                self._offer(post_id, held.tags, hour_of(held.created_ms), held.score)
        return Engaged(unseen, events)

    def _offer(self, post_id: str, tags: tuple[str, ...], hour: int, score: float) -> None:
        """Offer a post's score to its tags' top-posts lists of its hour (candidates only)."""
        bucket = self.buckets.get((WORLDWIDE, "h", hour))
        if bucket is None:
            return
        for tag in tags:
            if tag in bucket.candidates and self.top.offer(tag, hour, post_id, score):
                self.dirty[("top", tag, hour)] = None

    def _of_candidates(self, posts: list[tuple[Post, list[str]]]) -> tuple[dict, dict, dict]:
        """A step's authors and flat [created ms, post id, ...] newest-post entries per (tag, hour), for the tags
        among the hour's worldwide candidates only (which author sketches and newest-post lists are kept), in
        order of first mention, and the posts those entries name (post id -> post and tags). Taken after the
        step's sketches: a tag entering the candidates now counts now."""
        candidates_of: dict[int, dict[str, int]] = {}
        authors: dict[tuple[str, int], set[str]] = defaultdict(set)
        entries: dict[tuple[str, int], list] = defaultdict(list)
        found: dict[str, tuple[Post, list[str]]] = {}
        for post, tags in posts:
            hour = post.created_at_ms // HOUR_MS
            candidates = candidates_of.get(hour)
            if candidates is None:
                bucket = self.buckets.get((WORLDWIDE, "h", hour))
                candidates = candidates_of[hour] = bucket.candidates if bucket is not None else {}
            for tag in tags:
                if tag in candidates:
                    key = (tag, hour)
                    authors[key].add(post.user_id)
                    entries[key] += (post.created_at_ms, post.post_id)
                    found[post.post_id] = (post, tags)
        return authors, entries, found

    def _bucket(self, key: BucketKey) -> Bucket:
        found = self.buckets.get(key)
        if found is None:
            found = self.buckets[key] = Bucket(np.zeros(self.shape.cells, dtype=np.uint32))
        return found

    def _add_sketches(self, sketches: dict[BucketKey, Counter], cells: CellCache) -> None:
        """Add each sketch's summed cell increments, then offer its tags (estimates read back) as candidates."""
        if not sketches:
            return
        tags, flat, rows = step_cells(sketches, cells)
        matrix, names = flat.reshape(len(tags), self.shape.depth), np.array(tags, dtype=object)
        for (key, counter), (idx, ids, amounts) in zip(sketches.items(), rows, strict=True):
            bucket = self._bucket(key)
            sketch_blob.saturating_add(bucket.counters, ids, amounts)
            bucket.pending.append((ids, amounts))
            bucket.total += counter.total()
            estimates = bucket.counters[matrix[idx]].min(axis=1)
            dropped = cands.offer(bucket.candidates, names[idx], estimates, self.limits.candidates)
            if key[0] == WORLDWIDE and key[1] == "h" and dropped:
                self._forget(key[2], dropped)
            self.dirty[("bucket", *key)] = None

    def _forget(self, hour: int, tags: list[str]) -> None:
        """Drop the author sketches and newest-post lists of tags that left an hour's worldwide candidates
        (their keys are deleted at the next checkpoint)."""
        sketches = self.authors.get(hour, {})
        for tag in tags:
            if sketches.pop(tag, None) is not None:
                self.dirty[("authors", tag, hour)] = None
            if self.posts.drop(tag, hour):
                self.dirty[("posts", tag, hour)] = None
            if self.top.drop(tag, hour):
                self.dirty[("top", tag, hour)] = None

    def _add_authors(self, authors: dict[tuple[str, int], set[str]]) -> None:
        """Add the step's authors of (tag, hour)s among the worldwide hour candidates (`_of_candidates`);
        each author is hashed once per step, however many tags it wrote."""
        wanted = [(tag, hour, users) for (tag, hour), users in authors.items()]
        if not wanted:
            return
        position: dict[str, int] = {}
        for _, _, users in wanted:
            for user in users:
                position.setdefault(user, len(position))
        index, rank = registers_of(hash_values(position), self.limits.author_precision)
        for tag, hour, users in wanted:
            chosen = np.fromiter(map(position.__getitem__, users), dtype=np.intp, count=len(users))
            by_tag = self.authors.setdefault(hour, {})
            sketch = by_tag.get(tag)
            if sketch is None:
                sketch = by_tag[tag] = HyperLogLog(self.limits.author_precision)
            if sketch.add_registers(index[chosen], rank[chosen]):
                self.dirty[("authors", tag, hour)] = None

    def expire(self, now_ms: int) -> None:
        """Drop the buckets, author sketches and lists no longer kept at `now_ms` (their keys expire in
        Redis at the same moment: `Entry.expire_at_s`)."""
        gone = {key for key in self.buckets if now_ms >= self.limits.expire_at_s(key[1], key[2]) * 1000}
        for key in gone:
            del self.buckets[key]
            self.chunked.pop(key, None)
        hours = {*self.posts.lists, *self.top.lists, *self.authors}
        old = {hour for hour in hours if now_ms >= self.limits.expire_at_s("h", hour) * 1000}
        for hour in old:
            self.authors.pop(hour, None)
            self.posts.drop_hour(hour)
            self.top.drop_hour(hour)
        self.dirty = {d: None for d in self.dirty if (d[1:] not in gone if d[0] == "bucket" else d[2] not in old)}
        self.unpacked = {d: quiet for d, quiet in self.unpacked.items() if d[2] not in old}

    def checkpoint(self, partition: int) -> Checkpoint:
        """The entries changed since the last checkpoint, in the order they first changed (same increments,
        same bytes); the dirty set starts over. Post lists and author sketches are written plain while they
        change. Then the sketches of buckets that stopped changing with chunks appended, whole (`_compacted`),
        and the lists and author sketches that stopped changing, packed (`_packed_idle`)."""
        writes: list[Entry] = []
        deletes: list[str] = []
        hour_expiry: dict[int, int] = {}
        idle, idle_lists = self._idle_chunked(), self._idle_unpacked()
        for kind, *coords in self.dirty:
            if kind == "bucket":
                writes += self._bucket_entries(partition, tuple(coords))
                continue
            tag, hour = coords
            key, value = self._plain(partition, kind, tag, hour)
            if value is None:
                self.unpacked.pop((kind, tag, hour), None)
                deletes.append(key)
                continue
            self.unpacked[(kind, tag, hour)] = 0
            if hour not in hour_expiry:
                hour_expiry[hour] = self.limits.expire_at_s("h", hour)
            writes.append(Entry(key, value, hour_expiry[hour]))
        writes += [self._compacted(partition, key) for key in idle]
        writes += self._packed_idle(partition, idle_lists)
        self.dirty = {}
        return Checkpoint(partition, tuple(writes), tuple(deletes))

    def _plain(self, partition: int, kind: str, tag: str, hour: int) -> tuple[str, bytes | None]:
        """A newest ("posts") or top list's key and its value as JSON, or an author sketch's ("authors") and its
        trendcore.hll bytes (None: none, its key deleted)."""
        if kind == "posts":
            return self.keys.part_new_posts(partition, tag, hour), self.posts.value(tag, hour)
        if kind == "top":
            return self.keys.part_top_posts(partition, tag, hour), self.top.value(tag, hour)
        sketch = self.authors.get(hour, {}).get(tag)
        return self.keys.part_authors(partition, tag, hour), sketch.to_bytes() if sketch is not None else None

    def _idle_unpacked(self) -> list[tuple[str, str, int]]:
        """The plain values this checkpoint writes packed: unchanged for COMPACT_IDLE checkpoints before it."""
        return _went_quiet(self.unpacked, lambda coords: coords in self.dirty)

    def _packed_idle(self, partition: int, idle: list[tuple[str, str, int]]) -> list[Entry]:
        """The lists and author sketches that stopped changing, packed (trendcore.packing, trendcore.hll: about
        half the bytes, for the hours they are kept), with their hour's expiry; one that packing would not shrink
        (a list of a post or two, a sketch of a few authors) stays."""
        writes = []
        for kind, tag, hour in idle:
            del self.unpacked[(kind, tag, hour)]
            key, value = self._plain(partition, kind, tag, hour)
            if value is None:
                continue
            if kind == "authors":
                packed = self.authors[hour][tag].to_bytes(packed=True)
            else:
                packed = packing.packed_if_smaller(value) or value
            if packed != value:
                writes.append(Entry(key, packed, self.limits.expire_at_s("h", hour)))
        return writes

    def _bucket_entries(self, partition: int, key: BucketKey) -> list[Entry]:
        """A bucket's sketch (the chunk of cells changed since the last checkpoint, or the whole sketch) and meta
        (N and candidates)."""
        bucket, expire_at = self.buckets[key], self.limits.expire_at_s(key[1], key[2])
        meta = encode_meta(bucket.total, bucket.candidates)
        value, appended = self._sketch_write(bucket)
        if appended:
            self.chunked[key] = 0
        else:
            self.chunked.pop(key, None)
        return [Entry(self.keys.part_sketch(partition, *key), value, APPEND if appended else expire_at),
                Entry(self.keys.part_meta(partition, *key), meta, expire_at)]

    def _idle_chunked(self) -> list[BucketKey]:
        """The chunked buckets this checkpoint writes whole: unchanged for COMPACT_IDLE checkpoints before it."""
        return _went_quiet(self.chunked, lambda key: ("bucket", *key) in self.dirty)

    def _compacted(self, partition: int, key: BucketKey) -> Entry:
        """A bucket's sketch written whole in place of its chunks: Redis then holds it in as many bytes as it
        takes (one write a bucket's life, against one chunk a checkpoint while it changed)."""
        del self.chunked[key]
        bucket = self.buckets[key]
        whole = sketch_blob.encode(bucket.counters, self.shape)
        bucket.stored = bucket.whole = len(whole)
        return Entry(self.keys.part_sketch(partition, *key), whole, self.limits.expire_at_s(key[1], key[2]))

    def _sketch_write(self, bucket: Bucket) -> tuple[bytes, bool]:
        """(a chunk of the cells changed since the last checkpoint, True) while the stored value stays within
        twice its last whole write; else (the whole sketch, False), which starts over. The pending cells are
        taken either way."""
        pending, bucket.pending = bucket.pending, []
        if bucket.stored is not None and pending:
            cells, inverse = np.unique(np.concatenate([c for c, _ in pending]), return_inverse=True)
            amounts = np.zeros(len(cells), dtype=np.uint64)
            np.add.at(amounts, inverse, np.concatenate([a for _, a in pending]).astype(np.uint64))
            chunk = sketch_blob.chunk(cells, np.minimum(amounts, sketch_blob.U32_MAX), self.shape)
            if bucket.stored + len(chunk) <= 2 * bucket.whole:
                bucket.stored += len(chunk)
                return chunk, True
        whole = sketch_blob.encode(bucket.counters, self.shape)
        bucket.stored = bucket.whole = len(whole)
        return whole, False

    @classmethod
    def load(cls, entries: Iterable[tuple[str, bytes]], shape: SketchShape, limits: StateLimits,
             keys: KeySpace) -> PartitionState:
        """The state a partition's checkpointed keys describe (its offset key, if given, is left out);
        ValueError when the keys belong to several partitions or a value does not decode."""
        state, partitions, lists, tops = cls(shape, limits, keys), set(), [], []
        for key, value in entries:
            partition, kind, coords = keys.parse_part(key)
            partitions.add(partition)
            if kind == "cms":
                state._load_sketch(coords, value)
            elif kind == "meta":
                state._load_meta(coords, value)
            elif kind == "hll":
                state._load_authors(coords, value)
                state._plain_loaded("authors", coords, hll.is_packed(value))
            elif kind == "new":
                lists.append((*coords, packing.unpack(value)))
                state._plain_loaded("posts", coords, packing.is_packed(value))
            elif kind == "top":
                tops.append((*coords, packing.unpack(value)))
                state._plain_loaded("top", coords, packing.is_packed(value))
        if len(partitions) > 1:
            raise ValueError(f"keys of several partitions: {sorted(partitions)}")
        state.posts.load(lists)
        state.top.load(tops)
        return state

    def _plain_loaded(self, kind: str, coords: tuple[str, int], packed: bool) -> None:
        """A list or author sketch loaded plain (it was changing, or an older worker wrote it) is packed once it
        stops changing."""
        if not packed:
            self.unpacked[(kind, *coords)] = 0

    def _load_sketch(self, key: BucketKey, value: bytes) -> None:
        """A checkpointed sketch: its counters, and what Redis holds of it (chunks append to it when it can take
        them; a pre-chunk blob is written whole first)."""
        bucket = self._bucket(key)
        bucket.counters = sketch_blob.decode(value, self.shape)
        if sketch_blob.appendable(value):
            bucket.stored, bucket.whole = len(value), len(sketch_blob.encode(bucket.counters, self.shape))
            if bucket.stored > bucket.whole:
                self.chunked[key] = COMPACT_IDLE - 1  # loaded after a hand-off: written whole at the first checkpoint

    def _load_meta(self, key: BucketKey, value: bytes) -> None:
        bucket = self._bucket(key)
        bucket.total, bucket.candidates = decode_meta(value)

    def _load_authors(self, coords: tuple[str, int], value: bytes) -> None:
        sketch = HyperLogLog.from_bytes(value)
        if sketch.p != self.limits.author_precision:
            raise ValueError(f"author sketch of precision {sketch.p}, expected {self.limits.author_precision}")
        self.authors.setdefault(coords[1], {})[coords[0]] = sketch
