"""Redis reads of the serving layer, following docs/redis-layout.md; Redis errors become ServiceError.

Key names come from the KeySpace each function is given (the app's, built once from the settings). Every read
works on Redis Cluster too: a command names keys of one hash slot only, and pipelines and MGET are split per
slot by the client (a tag's merged author sketches and post lists share its hash tag: one slot)."""

from __future__ import annotations

from pathlib import Path

import redis

from adapters import redis as redis_io
from adapters.redis import redis_errors
from serving.merge import Bucket, Segment, day_hours, is_closed, is_retained
from trendcore.cms import SketchShape, cell_indexes
from trendcore.hll import HyperLogLog
from trendcore.keys import KeySpace
from trendcore.packing import unpack
from trendcore.settings import Settings
from trendcore.snapshot import Rebuilding

SKETCH_READS = (Path(__file__).parent / "sketch_reads.lua").read_text()
"""The script that reads a window's sketch estimates on a single server (`_sketch_segments`)."""


def read_snapshot(client: redis.Redis, keys: KeySpace, region: str, window: str, rank: str) -> bytes | None:
    """The materialized trending JSON, as the speed layer wrote it (None when absent)."""
    with redis_errors("reading the trending snapshot"):
        return client.get(keys.trending(region, window, rank))


def _exact_key(keys: KeySpace, region: str, bucket: Bucket) -> str:
    return keys.exact_day(region, bucket.index) if bucket.unit == "d" else keys.exact_hour(region, bucket.index)


def _exact_counts(client: redis.Redis, keys: KeySpace, region: str, tag: str,
                  buckets: list[Bucket]) -> dict[Bucket, int]:
    """Exact counts of the published buckets among `buckets` (a view is published when its hash or meta exists;
    one EXISTS each: on a cluster the two keys are in different slots)."""
    if not buckets:
        return {}
    pipe = client.pipeline(transaction=False)
    for b in buckets:
        pipe.exists(keys.exact_meta(region, b.unit, b.index))
        pipe.exists(_exact_key(keys, region, b))
        pipe.hget(_exact_key(keys, region, b), tag)
    replies = pipe.execute()
    found = {}
    for i, b in enumerate(buckets):
        meta, view, count = replies[3 * i : 3 * i + 3]
        if meta or view:
            found[b] = int(count or 0)
    return found


def _sketch_segments(client: redis.Redis, keys: KeySpace, shape: SketchShape, region: str, tag: str,
                     buckets: list[Bucket]) -> list[Segment]:
    """Per-bucket estimates (min over the tag's cells, read with BITFIELD_RO) and N of each bucket. On a single
    server in one script call (serving/sketch_reads.lua): a command costs the API process several µs however
    small its reply, and a 1 h window has 60 buckets (bench/read_commands.py). On a cluster the buckets' keys
    lie in different slots: a BITFIELD_RO and a GET a bucket, pipelined."""
    if not buckets:
        return []
    cells = cell_indexes(tag, shape)
    names = [(keys.cms(region, b.unit, b.index), keys.total(region, b.unit, b.index)) for b in buckets]
    if not redis_io.is_cluster(client):
        flat = client.register_script(SKETCH_READS)(keys=[n for pair in names for n in pair], args=list(cells))
        return [Segment(b, "approx", int(flat[2 * i]), int(flat[2 * i + 1])) for i, b in enumerate(buckets)]
    pipe = client.pipeline(transaction=False)
    for sketch, total in names:
        pipe.bitfield_ro(sketch, "u32", f"#{cells[0]}", [("u32", f"#{c}") for c in cells[1:]])
        pipe.get(total)
    replies = pipe.execute()
    return [Segment(b, "approx", min(replies[2 * i]), int(replies[2 * i + 1] or 0)) for i, b in enumerate(buckets)]


def count_segments(client: redis.Redis, keys: KeySpace, settings: Settings, region: str, tag: str,
                   plan: list[Bucket], now_ms: int) -> list[Segment]:
    """Answer each bucket: exact view if published for a closed bucket, else the sketch while the speed layer
    keeps it, else `missing`; days the batch layer has not published expand to hours."""
    with redis_errors(f"reading counts of {tag!r}"):
        closed = [b for b in plan if b.unit != "m" and is_closed(b, now_ms)]
        exact = _exact_counts(client, keys, region, tag, closed)
        hours = [h for b in plan if b.unit == "d" and b not in exact for h in day_hours(b.index)]
        exact.update(_exact_counts(client, keys, region, tag, [h for h in hours if is_closed(h, now_ms)]))
        flat = [x for b in plan for x in (day_hours(b.index) if b.unit == "d" and b not in exact else [b])]
        kept = [b for b in flat if b not in exact and is_retained(b, now_ms, settings.speed)]
        approx = dict(zip(kept, _sketch_segments(client, keys, settings.sketch.shape, region, tag, kept), strict=True))
        return [Segment(b, "exact", exact[b]) if b in exact else approx.get(b) or Segment(b, "missing", 0)
                for b in flat]


def display_name(client: redis.Redis, keys: KeySpace, tag: str, hours: list[int]) -> str:
    """The tag's display spelling from the newest of `hours` that has one; the key itself otherwise. The newest
    hour is asked alone first: a tag read is mostly one in use now, and the others cost a command each."""
    newest_first = sorted(hours, reverse=True)
    with redis_errors("reading display names"):
        for batch in (newest_first[:1], newest_first[1:]):
            pipe = client.pipeline(transaction=False)
            for hour in batch:
                pipe.hget(keys.display(hour), tag)
            for value in pipe.execute() if batch else ():
                if value:
                    return value.decode("utf-8", "replace")
    return tag


def distinct_authors(client: redis.Redis, keys: KeySpace, tag: str, hours: list[int]) -> int:
    """Distinct authors of the tag over the hours: the union of the merger's author sketches (trendcore.hll
    bytes, about 1.6 % error), read with one MGET (the tag's hash tag puts its hours in one slot)."""
    with redis_errors("counting authors"):
        blobs = redis_io.mget(client, [keys.merged_authors(tag, h) for h in hours])
    union = None
    for blob in blobs:
        if blob is not None:
            sketch = HyperLogLog.from_bytes(blob)
            if union is None:
                union = sketch
            else:
                union.merge(sketch)
    return round(union.estimate()) if union is not None else 0


def rebuilding(client: redis.Redis, keys: KeySpace) -> dict | None:
    """The merger's summary of the partitions replaying (one GET), as the answers carry it; None when none
    replays (or the value is not a summary: bad data never fails a count)."""
    with redis_errors("reading the rebuilding flag"):
        raw = client.get(keys.rebuilding)
    if raw is None:
        return None
    try:
        return Rebuilding.model_validate_json(raw).model_dump()
    except ValueError:
        return None


def exact_posts(client: redis.Redis, key: str, k: int) -> list[tuple[str, float]]:
    """The k highest-scored post ids of the batch layer's sorted set of a published day, best first."""
    with redis_errors("reading posts"):
        pairs = client.zrevrange(key, 0, k - 1, withscores=True)
    return [(pid.decode("utf-8", "replace"), float(score)) for pid, score in pairs]


def post_lists(client: redis.Redis, names: list[str]) -> list[bytes | None]:
    """The merger's post lists (JSON, bodies inside, unpacked; None where absent), one MGET per slot (a tag's
    hours share its hash tag)."""
    with redis_errors("reading posts"):
        blobs = redis_io.mget(client, names)
    return [unpack(blob) if blob is not None else None for blob in blobs]


def merged_offsets(client: redis.Redis, keys: KeySpace, partitions: list[tuple[str, int]]) -> list[int | None]:
    """The offset of each (topic, partition) the merger last merged up to (None: none merged yet); a record
    below it is in the keys readers use."""
    with redis_errors("reading merged offsets"):
        values = redis_io.mget(client, [keys.part_merged(part, topic) for topic, part in partitions])
    return [int(v) if v is not None else None for v in values]


def key_exists(client: redis.Redis, key: str) -> bool:
    with redis_errors("checking a key"):
        return bool(client.exists(key))

