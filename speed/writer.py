"""The Redis side of the speed layer: one atomic script per partition micro-batch, plus offset reads.

The script checks the epoch sentinel and that the stored next offset equals the batch's start
offset, applies every increment and moves the offset, all in one step: a crash either applies a
batch entirely or not at all, and a zombie's batch (stale start offset) is refused.
"""

from __future__ import annotations

import heapq
import uuid
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import orjson
import redis

from adapters.redis import redis_errors
from speed.aggregate import Increments
from speed.cells import CellCache, step_cells
from speed.errors import DataLost, Duplicates, StaleBatch
from trendcore.keys import KeySpace
from trendcore.settings.speed import SpeedSettings
from trendcore.windows import bucket_expire_at_s, hour_of

_SCRIPT = (Path(__file__).parent / "apply.lua").read_text()
_MOVE_OFFSET = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2]) return 1 end return 0"
)


def _newest(flat: list[str], keep: int) -> list[str]:
    """The `keep` highest (created ms, post id) pairs of a flat [ms, id, ...] list: the script trims a
    newest-posts set to the highest (score, member), so no other pair of the step could stay."""
    if len(flat) <= 2 * keep:
        return flat
    pairs = heapq.nlargest(keep, zip(map(int, flat[::2]), flat[1::2], strict=True))
    return [x for ms, post_id in pairs for x in (str(ms), post_id)]


@dataclass(frozen=True)
class Target:
    """Where a batch goes: its partition's offset key and the expected epoch token."""

    offset_key: str
    epoch_key: str
    epoch: str


def build_payload(inc: Increments, target: Target, start: int, next_offset: int,
                  speed: SpeedSettings, cells: CellCache, keys: KeySpace) -> bytes:
    """The JSON the Lua script applies: every key name from `keys` (the script builds none), cells from
    trendcore.cms."""
    keep = {"m": speed.keep_minutes, "h": speed.keep_hours}
    step_tags, tag_cells, rows = step_cells(inc.sketches, cells)
    sketches = [[keys.cms(region, unit, bucket), keys.total(region, unit, bucket),
                 keys.candidates(region, unit, bucket), bucket_expire_at_s(bucket, unit, keep[unit]),
                 counter.total(), idx, cell_ids, amounts]
                for ((region, unit, bucket), counter), (idx, cell_ids, amounts)
                in zip(inc.sketches.items(), rows, strict=True)]
    # an hour's keys' expiry, as a string (Redis formats Lua numbers with snprintf), once per hour
    hour_exp = cache(lambda hour: str(bucket_expire_at_s(hour, "h", speed.keep_hours)))
    posts, ttl = [], str(speed.post_ttl_s)
    for post, tags in inc.posts:
        hour = hour_of(post.created_at_ms)
        fields = ["text", post.text, "region", post.region, "user_id", post.user_id,
                  "created_at", str(post.created_at_ms), "exp", hour_exp(hour)]
        if tags:
            fields += ["top", "\n".join(keys.top_posts(t, hour) for t in tags)]
        posts.append([keys.post(post.post_id), ttl, fields])
    payload = {
        "ek": target.epoch_key, "ev": target.epoch, "ok": target.offset_key,
        "s": str(start), "n": str(next_offset), "d": cells.shape.depth, "nb": cells.shape.nbytes,
        "cs": speed.candidates, "pt": speed.posts_per_tag, "tg": step_tags, "tc": tag_cells, "sk": sketches,
        "ph": posts,
        "hll": [[keys.authors(t, h), hour_exp(h), list(users)] for (t, h), users in inc.authors.items()],
        "np": [[keys.new_posts(t, h), hour_exp(h), _newest(flat, speed.posts_per_tag)]
               for (t, h), flat in inc.new_posts.items()],
        "dp": [[keys.display(h), hour_exp(h), [x for kv in names.items() for x in kv]]
               for h, names in inc.display.items()],
        "en": _engagements(keys, inc),
    }
    return orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY)


def _engagements(keys: KeySpace, inc: Increments) -> list[list]:
    """`en` rows: post key, post id, summed weight without event_id, then [event_id, weight, ...] flat."""
    rows = []
    for pid in [*inc.engagement, *(p for p in inc.engagement_ids if p not in inc.engagement)]:
        named = inc.engagement_ids.get(pid, {})
        rows.append([keys.post(pid), pid, repr(inc.engagement.get(pid, 0.0)),
                     [x for event_id, weight in named.items() for x in (event_id, repr(weight))]])
    return rows


class Writer:
    """Applies batches and reads offsets/epoch for one consumer group."""

    def __init__(self, client: redis.Redis, group: str, keys: KeySpace) -> None:
        self.client, self.group, self.keys = client, group, keys
        self.script = client.register_script(_SCRIPT)
        self.epoch_key = keys.epoch(group)

    def apply(self, payload: bytes) -> int:
        """Run the atomic step; return orphan engagements; raise StaleBatch, Duplicates or DataLost
        (speed.errors) when refused."""
        with redis_errors("applying a batch"):
            result = self.script(args=[payload])
        status = result[0].decode() if isinstance(result[0], bytes) else result[0]
        if status == "OK":
            return int(result[1])
        if status == "STALE":
            raise StaleBatch(f"stored offset is {result[1].decode()}")
        if status == "DUP":
            raise Duplicates([k.decode() for k in result[1:]])
        raise DataLost("epoch sentinel missing or changed")

    def ensure_epoch(self) -> str:
        """The current epoch token, creating one when missing (first start, or Redis lost its data)."""
        with redis_errors("reading the epoch sentinel"):
            self.client.set(self.epoch_key, uuid.uuid4().hex, nx=True)
            return self.client.get(self.epoch_key).decode()

    def current_epoch(self) -> str | None:
        with redis_errors("reading the epoch sentinel"):
            raw = self.client.get(self.epoch_key)
        return raw.decode() if raw else None

    def move_offset(self, topic: str, partition: int, expected: int, new: int) -> bool:
        """Set a partition's stored offset to `new` only if it still is `expected` (a check-and-set:
        another worker may have applied meanwhile); True when it moved."""
        with redis_errors("moving a stored offset"):
            key = self.keys.offset(self.group, topic, partition)
            return bool(self.client.eval(_MOVE_OFFSET, 1, key, expected, new))

    def stored_offsets(self, topic_partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
        """The next offset stored for each (topic, partition), None when there is none."""
        names = [self.keys.offset(self.group, t, p) for t, p in topic_partitions]
        with redis_errors("reading stored offsets"):
            raw = self.client.mget(names) if names else []
        return {tp: (int(v) if v is not None else None) for tp, v in zip(topic_partitions, raw, strict=True)}
