"""The merger (issue #24): the partitions' checkpointed state summed into the
keys readers use, run by the materializer before each round of snapshots.

Per bucket some partition checkpointed since the previous merge: the partitions' sketches summed into
`cms:*` (big-endian u32: the API reads cells with BITFIELD_RO), their N into `total:*`, the union of their
candidates estimated on the sum into `cand:*`, with the bucket's expiry. Per (tag, hour): the union of the
partitions' author sketches into `authors:{tag}:h:{hour}` (trendcore.hll bytes; the materializer counts
them), and the newest and top posts of their lists into `postlist:new:*` and `postlist:top:*` (JSON, bodies
inside) with the tag's display spelling into `display:h:{hour}`; the lists are stored packed
(trendcore.packing) once every partition's are (they all stopped changing). After a whole merge, each partition's
offsets as of the take go to `part:{p<N>}:merged:{topic}` (what `?wait=true` waits for), and the partitions'
replay markers are summed into `speed:rebuilding` (speed/replay.py: which partitions replay, and how far they
got), deleted when none replays. The merged values are a pure function of the partitions' keys, so a merge run
twice writes the same.

What changed: each checkpoint step adds the names it wrote or deleted to its partition's `changed` set; the
merger takes each set into the partition's `taking` set (one step, reading the partition's offsets in the same
step: every key of the partition's slot) and deletes the `taking` sets once the whole merge succeeded. The first
run of a process, and the run after a failed one, also merges every live key of every partition (their indexes);
a key deleted meanwhile has no live name, so its name waits in `taking` until a merge succeeds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import redis

from adapters.redis import redis_errors
from speed.cells import CellCache
from speed.merge import all_packed, display_of, merge_authors, merge_buckets, merge_newest, merge_top
from speed.replay import parse_marker, summary
from speed.state import StateLimits
from speed.state_codec import encode_posts, encode_top_posts
from trendcore import packing
from trendcore.cms import SketchShape
from trendcore.keys import KeySpace
from trendcore.settings import Settings
from trendcore.snapshot import Rebuilding

_MGET_KEYS = 1000
"""Names an MGET of the merger reads at most: a few hundred kB of reply, well under a millisecond of Redis."""

# the changed set moved into the taking set (which still holds what a failed merge took), with the partition's
# stored offsets at that moment (every key in its slot); the taking set is deleted once a merge succeeded
_TAKE = ("redis.call('SUNIONSTORE', KEYS[2], KEYS[2], KEYS[1]) redis.call('DEL', KEYS[1]) "
         "redis.call('EXPIRE', KEYS[2], 86400) "
         "return {redis.call('SMEMBERS', KEYS[2]), redis.call('GET', KEYS[3]) or '', redis.call('GET', KEYS[4]) or ''}")


@dataclass(slots=True)
class Changed:
    """What to merge: bucket coordinates (region, unit, bucket), author and post-list (tag, hour)s, and the
    partitions' stored offsets when their changes were taken ((partition, topic) -> offset)."""

    buckets: set[tuple[str, str, int]] = field(default_factory=set)
    authors: set[tuple[str, int]] = field(default_factory=set)
    lists: set[tuple[str, int]] = field(default_factory=set)
    offsets: dict[tuple[int, str], int] = field(default_factory=dict)

    def note(self, keys: KeySpace, names: list[bytes]) -> None:
        """Add the coordinates of partition state key names (other kinds are not merged)."""
        for raw in names:
            _, kind, coords = keys.parse_part(raw.decode())
            if kind in ("cms", "meta"):
                self.buckets.add(coords)
            elif kind == "hll":
                self.authors.add(coords)
            elif kind in ("new", "top"):
                self.lists.add(coords)


class Merger:
    """Merges the partitions' state into the readers' keys, for one key space and partition count."""

    def __init__(self, client: redis.Redis, keys: KeySpace, settings: Settings) -> None:
        self.client, self.keys = client, keys
        self.partitions = settings.kafka.partitions
        self.topics = (settings.kafka.posts_topic, settings.kafka.engagements_topic)
        self.posts_per_tag = settings.speed.posts_per_tag
        self.shape: SketchShape = settings.sketch.shape
        self.candidates = settings.speed.candidates
        self.limits = StateLimits.of(settings.speed)
        self.cells = CellCache(self.shape)
        self.take = client.register_script(_TAKE)
        self.everything = True  # the first run merges every live key
        self.ranked: dict[tuple[str, str, int], dict[str, int]] = {}  # what cand:* holds, as last written
        self.flag_ttl_s = settings.speed.rebuild_flag_ttl_s
        self.rebuilding: Rebuilding | None = None  # as the last run found it

    def run(self, now_ms: int) -> int:
        """One merge; how many buckets and (tag, hour)s it wrote. After a failure the next run merges all."""
        everything, self.everything = self.everything, True
        if everything:  # what cand:* holds is unknown after a failure: rewrite each merged bucket's whole
            self.ranked.clear()
        self._forget_expired(now_ms // 1000)
        changed = self._changed(everything, now_ms)
        written = self._merge_buckets(sorted(changed.buckets)) + self._merge_authors(sorted(changed.authors))
        written += self._merge_lists(sorted(changed.lists))
        self._record_merged(changed.offsets)
        self._merged_all_taken()
        self.rebuilding = self.record_rebuilding()
        self.everything = False
        return written

    def _merged_all_taken(self) -> None:
        """Every taken change is merged: drop the taking sets (a failure before this leaves them for the next run,
        which also merges every live key: a deleted key has no live name left, only its taken one)."""
        write = self.client.pipeline(transaction=False)
        for p in range(self.partitions):
            write.delete(self.keys.part_taking(p))
        with redis_errors("dropping the merged changes"):
            write.execute()

    def _forget_expired(self, now_s: int) -> None:
        """Drop the remembered candidates of buckets past their keeping (Redis expired their keys)."""
        for coords in [c for c in self.ranked if self.limits.expire_at_s(c[1], c[2]) <= now_s]:
            del self.ranked[coords]

    def _changed(self, everything: bool, now_ms: int) -> Changed:
        """The changed sets taken from every partition (and, with `everything`, every live key)."""
        changed = Changed()
        with redis_errors("taking the partitions' changes"):
            for p in range(self.partitions):
                offsets = [self.keys.part_offset(p, topic) for topic in self.topics]
                names, *stored = self.take(keys=[self.keys.part_changed(p), self.keys.part_taking(p), *offsets])
                changed.note(self.keys, names)
                changed.offsets.update({(p, t): int(v) for t, v in zip(self.topics, stored, strict=True) if v})
                if everything:
                    live = self.client.zrangebyscore(self.keys.part_index(p), f"({now_ms // 1000}", "+inf")
                    changed.note(self.keys, live)
        return changed

    def _merge_buckets(self, buckets: list[tuple[str, str, int]]) -> int:
        """Sum each bucket over the partitions into cms:*, total:* and cand:* (deleted when none has it)."""
        if not buckets:
            return 0
        found = self._read_partitions(  # a sketch and its N in one MGET: from the same checkpoint
            lambda p: [name for c in buckets for name in (self.keys.part_sketch(p, *c), self.keys.part_meta(p, *c))],
            "reading the partitions' buckets")
        write = self.client.pipeline(transaction=False)
        for i, coords in enumerate(buckets):
            self._write_bucket(write, coords, [(row[2 * i], row[2 * i + 1]) for row in found])
        with redis_errors("writing merged buckets"):
            write.execute()
        return len(buckets)

    def _write_bucket(self, write, coords: tuple[str, str, int],
                      pairs: list[tuple[bytes | None, bytes | None]]) -> None:
        """Queue one merged bucket's writes: only the candidates that moved, all of them the first time."""
        cms, total, cand = self.keys.cms(*coords), self.keys.total(*coords), self.keys.candidates(*coords)
        if all(sketch is None and meta is None for sketch, meta in pairs):
            for name in (cms, total, cand):  # one key each: on a cluster they sit in different slots
                write.delete(name)
            self.ranked.pop(coords, None)
            return
        merged = merge_buckets(pairs, self.shape, self.candidates, self.cells)
        expire_at = self.limits.expire_at_s(coords[1], coords[2])
        write.set(cms, merged.counters.astype(">u4").tobytes(), exat=expire_at)
        write.set(total, merged.total, exat=expire_at)
        now = dict(merged.candidates)
        before = self.ranked.get(coords)
        if before is None:
            write.delete(cand)
            before = {}
        gone = before.keys() - now.keys()
        moved = {tag: est for tag, est in now.items() if before.get(tag) != est}
        if gone:
            write.zrem(cand, *sorted(gone))
        if moved:
            write.zadd(cand, moved)
        write.expireat(cand, expire_at)
        self.ranked[coords] = now

    def _merge_authors(self, authors: list[tuple[str, int]]) -> int:
        """The union of each (tag, hour)'s author sketches over the partitions (deleted when none has one)."""
        if not authors:
            return 0
        found = self._read_partitions(lambda p: [self.keys.part_authors(p, tag, hour) for tag, hour in authors],
                                      "reading the partitions' author sketches")
        write = self.client.pipeline(transaction=False)
        for i, (tag, hour) in enumerate(authors):
            sketch = merge_authors([row[i] for row in found])
            if sketch is None:
                write.delete(self.keys.merged_authors(tag, hour))
            else:  # plain: the materializer reads a trending tag's 24 hours every round (bench/hll_pack.py)
                write.set(self.keys.merged_authors(tag, hour), sketch.to_bytes(),
                          exat=self.limits.expire_at_s("h", hour))
        with redis_errors("writing merged author sketches"):
            write.execute()
        return len(authors)

    def _merge_lists(self, lists: list[tuple[str, int]]) -> int:
        """Each (tag, hour)'s newest and top posts over the partitions into `postlist:new:*` and `postlist:top:*`
        (bodies inside the entries: no key per post), and its display spelling into `display:h:{hour}`
        (deleted when no partition holds a list)."""
        if not lists:
            return 0
        found = self._read_partitions(
            lambda p: [name for tag, hour in lists
                       for name in (self.keys.part_new_posts(p, tag, hour), self.keys.part_top_posts(p, tag, hour))],
            "reading the partitions' post lists")
        write = self.client.pipeline(transaction=False)
        for i, (tag, hour) in enumerate(lists):
            news, tops = [row[2 * i] for row in found], [row[2 * i + 1] for row in found]
            newest, top = merge_newest(news, self.posts_per_tag), merge_top(tops, self.posts_per_tag)
            self._write_lists(write, tag, hour, (newest, all_packed(news)), (top, all_packed(tops)))
        with redis_errors("writing merged post lists"):
            write.execute()
        return len(lists)

    def _read_partitions(self, names_of: Callable[[int], list[str]], action: str) -> list[list[bytes | None]]:
        """Each partition's values of `names_of(partition)`, by MGETs of at most _MGET_KEYS names: a partition's keys
        share its slot, so one command reads many (a GET a key cost the merger most of its time in command packing).
        Raw MGET: redis-py's cluster pipeline refuses its `mget` method."""
        read, sizes = self.client.pipeline(transaction=False), []
        for p in range(self.partitions):
            names = names_of(p)
            sizes.append(len(names))
            for start in range(0, len(names), _MGET_KEYS):
                read.execute_command("MGET", *names[start:start + _MGET_KEYS])
        with redis_errors(action):
            chunks = iter(read.execute())
        return [[v for _ in range(0, n, _MGET_KEYS) for v in next(chunks)] for n in sizes]

    def _write_lists(self, write, tag: str, hour: int, newest: tuple[list, bool], top: tuple[list, bool]) -> None:
        """Queue one (tag, hour)'s merged lists, each (entries, whether to pack it), and display spelling (one key
        a command: cluster-safe)."""
        expire_at = self.limits.expire_at_s("h", hour)
        for name, (entries, quiet), encode in ((self.keys.merged_new_posts(tag, hour), newest, encode_posts),
                                               (self.keys.merged_top_posts(tag, hour), top, encode_top_posts)):
            if entries:
                write.set(name, _stored(encode(entries), quiet), exat=expire_at)
            else:
                write.delete(name)
        spelling, display = display_of(tag, newest[0], top[0]), self.keys.display(hour)
        if spelling is None:
            write.hdel(display, tag)
        else:
            write.hset(display, tag, spelling)
            write.expireat(display, expire_at)

    def _record_merged(self, offsets: dict[tuple[int, str], int]) -> None:
        """After a whole merge: each partition's offsets as they were when its changes were taken, so that
        `POST ...?wait=true` knows a record is in the merged keys (`part:{p<N>}:merged:{topic}`)."""
        if not offsets:
            return
        write = self.client.pipeline(transaction=False)
        for (p, topic), offset in offsets.items():
            write.set(self.keys.part_merged(p, topic), offset)
        with redis_errors("recording the merged offsets"):
            write.execute()

    def record_rebuilding(self) -> Rebuilding | None:
        """Read every partition's replay markers (one GET each, pipelined: one slot a command) and write their
        summary to `speed:rebuilding` (deleted when no partition replays); return it for the snapshots."""
        read = self.client.pipeline(transaction=False)
        for p in range(self.partitions):
            for topic in self.topics:
                read.get(self.keys.part_replay(p, topic))
        with redis_errors("reading the partitions' replay markers"):
            found = summary(parse_marker(blob) for blob in read.execute())
        with redis_errors("writing the rebuilding summary"):
            if found is None:
                self.client.delete(self.keys.rebuilding)
            else:
                self.client.set(self.keys.rebuilding, found.model_dump_json(), ex=self.flag_ttl_s)
        return found


def _stored(value: bytes, quiet: bool) -> bytes:
    """A merged list as stored: packed when every partition's was (they stopped changing) and packing shrinks
    it, else plain."""
    return (packing.packed_if_smaller(value) or value) if quiet else value
