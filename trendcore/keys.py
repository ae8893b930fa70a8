"""The Redis key layout, in one place: the speed layer writes, the batch layer publishes, serving reads.

Every key name comes from a `KeySpace`: its prefix (`redis.key_prefix`, "" by default) goes before each
name, so one Redis can hold several deployments and an ACL key pattern such as `~trends:*` covers every
key the project reads or writes. Entry points build one with `KeySpace.of(settings)` and pass it
down; nothing here reads settings or keeps state.

Every method returns a key name; docs/redis-layout.md describes each value and its TTL.
Units are 'm' (minute bucket) and 'h' (hour bucket); buckets are epoch-based indexes
(trendcore.windows); region is an ISO code or 'all'.

Braces in a name are a Redis Cluster hash tag: only the part between them picks the hash slot, so keys
that one command reads together (MGET over a tag's hours, COPY between a region's
baselines) or that RENAME swaps (a staging name and its view) share a slot; single-node Redis ignores them.
A partition's keys share one tag (`partition_tag`), chosen so that the partitions spread evenly over the slots.
"""

from __future__ import annotations

import binascii
import re
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trendcore.settings import Settings

PREFIX_PATTERN = r"^[A-Za-z0-9_.:/-]*$"
"""What a key prefix may hold: no space, no glob character (SCAN patterns) and no `%` (the batch layer
fills key names in with printf patterns)."""


_NO_BRACES = str.maketrans("", "", "{}")

SLOTS = 16384
"""Hash slots of a Redis Cluster."""

DEFAULT_PARTITIONS = 4
"""The default settings' partitions a topic (`kafka.partitions`): the count `KeySpace()` spreads over."""


def hash_tag(key: str) -> str | None:
    """The hash tag of a key name as Redis Cluster reads it: the text between the first `{` and the first `}`
    after it, when not empty (None otherwise: the whole name picks the slot)."""
    start = key.find("{")
    end = key.find("}", start + 1) if start >= 0 else -1
    return key[start + 1:end] if end > start + 1 else None


def slot(key: str) -> int:
    """The Redis Cluster hash slot of a key name: CRC16 (XMODEM, which `binascii.crc_hqx` computes) of its
    hash tag, or of the whole name without one, modulo 16,384."""
    tag = hash_tag(key)
    return binascii.crc_hqx((key if tag is None else tag).encode(), 0) % SLOTS


@cache
def partition_tag(partition: int, partitions: int) -> str:
    """The hash tag of a partition's keys: `p<N>.<k>`, with the smallest k whose slot lies in the middle quarter
    of the partition's 1/partitions of the slots. Partitions then sit evenly spaced on the slot ring, so any
    cluster whose masters hold equal runs of slots (what `redis-cli --cluster create` makes) gets an even share
    of them: 20 partitions fall 7 / 6 / 7 on three masters, where plain `{p0}`..`{p19}` fall 5 / 7 / 8."""
    if not 1 <= partitions <= SLOTS:
        raise ValueError(f"{partitions} partitions: a cluster has {SLOTS} slots, so 1 to {SLOTS}")
    width = SLOTS / partitions
    centre = (partition % partitions + 0.5) * width
    low, high = int(centre - width / 8), max(int(centre + width / 8), int(centre - width / 8) + 1)
    k = 0
    while not low <= binascii.crc_hqx(f"p{partition}.{k}".encode(), 0) % SLOTS < high:
        k += 1
    return f"p{partition}.{k}"


def _is_tag(part: str) -> bool:
    """True for one `{...}` part of a name."""
    return len(part) > 2 and part[0] == "{" and part[-1] == "}"


@dataclass(frozen=True)
class KeySpace:
    """The key builders (and their inverses) under one prefix, for topics of `partitions` partitions (which
    picks the partitions' hash tags: `partition_tag`)."""

    prefix: str = ""
    partitions: int = DEFAULT_PARTITIONS

    def __post_init__(self) -> None:
        if not re.fullmatch(PREFIX_PATTERN, self.prefix):
            raise ValueError(f"key prefix {self.prefix!r}: only letters, digits and _ . : / - may be used")
        if not 1 <= self.partitions <= SLOTS:
            raise ValueError(f"{self.partitions} partitions: a cluster has {SLOTS} slots, so 1 to {SLOTS}")

    @classmethod
    def of(cls, settings: Settings) -> KeySpace:
        """The key space the settings name: `redis.key_prefix`, over `kafka.partitions` partitions."""
        return cls(settings.redis.key_prefix, settings.kafka.partitions)

    def _part(self, partition: int) -> str:
        """The start of a partition's key names: `part:` and its hash tag `{p<N>.<k>}` (`partition_tag`), so a
        Redis Cluster puts every key of a partition in one slot (one atomic checkpoint). The prefix holds no `{`:
        this is the first tag."""
        return f"part:{{{partition_tag(partition, self.partitions)}}}:"

    def _name(self, name: str) -> str:
        return self.prefix + name

    def _strip(self, key: str, what: str) -> str:
        """`key` without the prefix; ValueError when it is not in this key space."""
        if not key.startswith(self.prefix):
            raise ValueError(f"{key!r} is not a {what} key of prefix {self.prefix!r}")
        return key[len(self.prefix):]

    def match(self, glob: str) -> str:
        """A SCAN/KEYS pattern of this key space, e.g. `match("exact_meta:*")`."""
        return self._name(glob)

    def cms(self, region: str, unit: str, bucket: int) -> str:
        """Count-min sketch: a string of u32 counters (BITFIELD), one per (region, bucket)."""
        return self._name(f"cms:{region}:{unit}:{bucket}")

    def total(self, region: str, unit: str, bucket: int) -> str:
        """N of a bucket: mentions added to its sketch (INCRBY), for the eps * N bound."""
        return self._name(f"total:{region}:{unit}:{bucket}")

    def candidates(self, region: str, unit: str, bucket: int) -> str:
        """Sorted set of candidate tags of a bucket, score = estimated count, trimmed to a fixed size."""
        return self._name(f"cand:{region}:{unit}:{bucket}")

    def display(self, hour: int) -> str:
        """Hash tag -> display spelling: its spelling in the oldest post the merged lists of that hour hold."""
        return self._name(f"display:h:{hour}")

    def part_sketch(self, partition: int, region: str, unit: str, bucket: int) -> str:
        """A partition's own counters of a bucket (trendcore.sketch_blob), written at each checkpoint (issue #24)."""
        return self._name(f"{self._part(partition)}cms:{region}:{unit}:{bucket}")

    def part_meta(self, partition: int, region: str, unit: str, bucket: int) -> str:
        """JSON {"n": total, "c": {tag: estimate, ...}} of a partition's bucket: its N and its candidates."""
        return self._name(f"{self._part(partition)}meta:{region}:{unit}:{bucket}")

    def part_authors(self, partition: int, tag: str, hour: int) -> str:
        """A partition's distinct-author sketch (trendcore.hll bytes) of a tag in an hour."""
        return self._name(f"{self._part(partition)}hll:{tag}:h:{hour}")

    def part_new_posts(self, partition: int, tag: str, hour: int) -> str:
        """JSON [[created ms, post id, text, region, user id], ...]: a partition's newest posts of a tag and hour."""
        return self._name(f"{self._part(partition)}new:{tag}:h:{hour}")

    def part_top_posts(self, partition: int, tag: str, hour: int) -> str:
        """JSON [[score, created ms, post id, text, region, user id], ...]: a partition's top posts of a tag and hour
        by summed engagement weight."""
        return self._name(f"{self._part(partition)}top:{tag}:h:{hour}")

    def part_events(self, partition: int, first_offset: int) -> str:
        """6-byte fingerprints of the engagement event ids (post id, NUL, event id) a partition added from offset
        `first_offset` on (one chunk per checkpoint): its event-id dedupe, bounded by `speed.seen_event_ids`."""
        return self._name(f"{self._part(partition)}events:{first_offset}")

    def part_merged(self, partition: int, topic: str) -> str:
        """The partition's offset of `topic` the merger last merged up to (`POST ...?wait=true` waits for it)."""
        return self._name(f"{self._part(partition)}merged:{topic}")

    def part_replay(self, partition: int, topic: str) -> str:
        """JSON {topic, partition, from_offset, target_offset, reached_offset} while a partition of `topic` replays
        (no checkpoint, or a long backlog, when positioned): written by its checkpoint step, deleted once it caught
        up, with a TTL so that a dead worker's marker does not linger (speed/replay.py)."""
        return self._name(f"{self._part(partition)}replay:{topic}")

    def part_offset(self, partition: int, topic: str) -> str:
        """Next offset of a partition, written in the same atomic step as its checkpoint's keys."""
        return self._name(f"{self._part(partition)}offset:{topic}")

    def part_seen(self, partition: int, first_offset: int) -> str:
        """6-byte fingerprints of the post ids a partition took from offset `first_offset` on (one chunk per
        checkpoint): its duplicate check, bounded by `speed.seen_post_ids`, reloaded by a new owner."""
        return self._name(f"{self._part(partition)}seen:{first_offset}")

    def part_index(self, partition: int) -> str:
        """Sorted set of the partition's live state keys, score = the epoch second each expires at: what a new
        owner loads (no SCAN, so no node look-up on a cluster). Kept by the checkpoint step itself."""
        return self._name(f"{self._part(partition)}index")

    def part_changed(self, partition: int) -> str:
        """Set of the partition's state keys written or deleted since the merger last took them (speed.merger)."""
        return self._name(f"{self._part(partition)}changed")

    def part_taking(self, partition: int) -> str:
        """Set of the changed names the merger took and has not merged yet (speed.merger): kept until a merge
        succeeds, so a deletion taken by a failed merge is merged by the next one."""
        return self._name(f"{self._part(partition)}taking")

    def merged_authors(self, tag: str, hour: int) -> str:
        """Distinct authors of a tag in an hour over every partition (trendcore.hll bytes)."""
        return self._name(f"authors:{{{tag}}}:h:{hour}")

    def merged_new_posts(self, tag: str, hour: int) -> str:
        """JSON [[created ms, post id, text, region, user id], ...]: a tag's newest posts of an hour over every
        partition, newest first (the merger)."""
        return self._name(f"postlist:new:{{{tag}}}:h:{hour}")

    def merged_top_posts(self, tag: str, hour: int) -> str:
        """JSON [[score, created ms, post id, text, region, user id], ...]: a tag's top posts of an hour over every
        partition, best first (the merger)."""
        return self._name(f"postlist:top:{{{tag}}}:h:{hour}")

    def part_match(self, partition: int) -> str:
        """SCAN pattern of every key of a partition's state (all in its hash slot)."""
        return self._name(f"{self._part(partition)}*")

    def parse_part(self, key: str) -> tuple[int, str, tuple]:
        """(partition, kind, coordinates) of a `part_*()` key (their inverse): kind `cms` or `meta` with
        (region, unit, bucket), `hll`, `new` or `top` with (tag, hour), `offset`, `merged` or `replay` with
        (topic,), `seen` or `events` with (first offset,)."""
        name = self._strip(key, "partition state")
        match = re.fullmatch(r"part:\{p(\d+)\.\d+\}:(cms|meta|hll|new|top|offset|merged|replay|seen|events):(.+)", name,
                             re.DOTALL)
        if match is None:
            raise ValueError(f"{key!r} is not a partition state key")
        partition, kind, rest = int(match[1]), match[2], match[3]
        if not name.startswith(self._part(partition)):
            raise ValueError(f"{key!r} is not a partition state key of {self.partitions} partitions a topic")
        if kind in ("offset", "merged", "replay"):
            return partition, kind, (rest,)
        if kind in ("seen", "events"):
            if not rest.isdigit():
                raise ValueError(f"{key!r} is not a partition seen-ids key")
            return partition, kind, (int(rest),)
        if kind in ("cms", "meta"):
            parts = rest.split(":")
            if len(parts) != 3 or not parts[2].lstrip("-").isdigit():
                raise ValueError(f"{key!r} is not a partition bucket key")
            return partition, kind, (parts[0], parts[1], int(parts[2]))
        parts = rest.rsplit(":", 2)  # a tag may hold a colon: count from the end
        if len(parts) != 3 or parts[1] != "h" or not parts[2].lstrip("-").isdigit():
            raise ValueError(f"{key!r} is not a partition tag-hour key")
        return partition, kind, (parts[0], int(parts[2]))

    def epoch(self, group: str) -> str:
        """Sentinel written when a consumer group first applies data; its absence means Redis lost data."""
        return self._name(f"epoch:{group}")

    def trending(self, region: str, window: str, rank: str) -> str:
        """The materialized trending snapshot (JSON bytes) of a region, window (1h|24h) and rank (volume|rise)."""
        return self._name(f"trending:{region}:{window}:{rank}")

    def exact_hour(self, region: str, hour: int) -> str:
        """Hash tag -> exact mention count of a closed hour, published by the batch layer."""
        return self._name(f"exact:{region}:h:{hour}")

    def exact_day(self, region: str, day: int) -> str:
        """Hash tag -> exact mention count of a closed UTC day, published by the batch layer."""
        return self._name(f"exact:{region}:d:{day}")

    def parse_exact(self, key: str) -> tuple[str, str, int]:
        """(region, unit, bucket) of an `exact_hour()` or `exact_day()` key (their inverse)."""
        parts = self._strip(key, "exact view").split(":")
        if len(parts) != 4 or parts[0] != "exact" or parts[2] not in ("h", "d"):
            raise ValueError(f"{key!r} is not an exact view key")
        return parts[1], parts[2], int(parts[3])

    def exact_meta(self, region: str, unit: str, bucket: int) -> str:
        """Hash describing a published exact view: job run id, computed_at, total, row count."""
        return self._name(f"exact_meta:{region}:{unit}:{bucket}")

    def exact_top_posts(self, tag: str, day: int) -> str:
        """Sorted set post id -> engagement score of a closed day, published by the batch layer."""
        return self._name(f"exact_posts:{tag}:d:{day}")

    def baseline(self, region: str, hour_of_week: int) -> str:
        """Hash tag -> expected mentions for a region and hour of week (0 = Monday 00:00 UTC); the region is
        the hash tag, so the batch layer can COPY one hour's hash to the others server-side on a cluster."""
        return self._name(f"baseline:{{{region}}}:how:{hour_of_week}")

    def parse_baseline(self, key: str) -> tuple[str, int]:
        """(region, hour of week) of a `baseline()` key (its inverse)."""
        parts = self._strip(key, "baseline").split(":")
        if len(parts) != 4 or parts[0] != "baseline" or parts[2] != "how" or not _is_tag(parts[1]):
            raise ValueError(f"{key!r} is not a baseline key")
        return parts[1][1:-1], int(parts[3])

    def staging(self, run_id: str, key: str) -> str:
        """Where the batch layer writes a view before RENAMEing it over `key` (atomic swap); `key` is a
        full name of this key space, so the staging name is in it twice over. RENAME (and COPY) stay in one
        hash slot on a cluster: the name ends with `key` itself when it has a hash tag, else with `{key}`
        (`key` as the tag), and braces of the run id are dropped: either way it hashes to `key`'s slot."""
        tagged = hash_tag(key) is not None
        if not tagged and "}" in key:
            raise ValueError(f"{key!r} has a '}}' but no hash tag: no staging name shares its slot")
        return self._name(f"tmp:{run_id.translate(_NO_BRACES)}:{key if tagged else '{' + key + '}'}")

    @property
    def blocklist(self) -> str:
        """Set of tag keys that never trend."""
        return self._name("blocklist")

    @property
    def rebuilding(self) -> str:
        """JSON {partitions, progress} while partitions of the speed layer replay: the
        merger's summary of the `part_replay` markers, deleted when none (trendcore.snapshot.Rebuilding)."""
        return self._name("speed:rebuilding")

    @property
    def batch_status(self) -> str:
        """Hash `{job}:last_success_ms` / `{job}:failures` per batch job (BatchJobFailing alert), and
        `{job}:last_success_started_ms` (the exact DAGs' `archived` sensor reads it for `archive`)."""
        return self._name("ops:batch")

    @property
    def accuracy(self) -> str:
        """Hash region -> max error / (eps * N) of the newest compared hour, for the SpeedExactDrift alert."""
        return self._name("ops:accuracy")


PLAIN = KeySpace()
"""The key space without a prefix (the default settings'): for tools and tests that use those settings.
The layers never use it: they build theirs from the settings (`KeySpace.of`)."""

# The prefix-less builders as plain functions, for the tests and tools written against the default layout.
cms = PLAIN.cms
total = PLAIN.total
candidates = PLAIN.candidates
display = PLAIN.display
epoch = PLAIN.epoch
trending = PLAIN.trending
exact_hour = PLAIN.exact_hour
exact_day = PLAIN.exact_day
parse_exact = PLAIN.parse_exact
exact_meta = PLAIN.exact_meta
exact_top_posts = PLAIN.exact_top_posts
baseline = PLAIN.baseline
parse_baseline = PLAIN.parse_baseline
staging = PLAIN.staging
BLOCKLIST = PLAIN.blocklist
BATCH_STATUS = PLAIN.batch_status
ACCURACY = PLAIN.accuracy
