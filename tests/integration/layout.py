"""Writes the Redis layout (docs/redis-layout.md) the way the speed and batch layers do, for the serving
tests (test_serving_writer.py proves what it writes reads back cell-compatible through BITFIELD)."""

from __future__ import annotations

import time
import uuid

from trendcore import keys
from trendcore.cms import CountMinSketch, SketchShape
from trendcore.events import format_time
from trendcore.post_lists import NewPost, TopPost, decode_posts, decode_top_posts, encode_posts, encode_top_posts
from trendcore.snapshot import Snapshot, TrendEntry

TTL_S = 3600


def unique(prefix: str) -> str:
    """A tag no other test (or layer's test) writes: prefix + random letters."""
    return prefix + uuid.uuid4().hex[:10].translate(str.maketrans("0123456789", "ghijklmnop"))


class LayoutWriter:
    """Writes keys exactly as documented; every key gets a TTL like the real writers'."""

    def __init__(self, client, shape: SketchShape) -> None:
        self.client = client
        self.shape = shape

    def sketch(self, region: str, unit: str, bucket: int, counts: dict[str, int]) -> None:
        """A bucket's count-min sketch (big-endian u32 string) and its N, merged into what is there."""
        sketch = CountMinSketch.from_bytes(self.shape, self.client.get(keys.cms(region, unit, bucket)))
        for tag, n in counts.items():
            sketch.add(tag, n)
        self.client.set(keys.cms(region, unit, bucket), sketch.to_bytes(), ex=TTL_S)
        self.client.incrby(keys.total(region, unit, bucket), sum(counts.values()))
        self.client.expire(keys.total(region, unit, bucket), TTL_S)

    def exact(self, region: str, unit: str, bucket: int, counts: dict[str, int]) -> None:
        """A published exact view: the hash under a temporary key, RENAMEd, then its meta."""
        key = keys.exact_day(region, bucket) if unit == "d" else keys.exact_hour(region, bucket)
        tmp = f"{key}:tmp:{uuid.uuid4().hex}"
        pipe = self.client.pipeline(transaction=True)
        if counts:
            pipe.hset(tmp, mapping=counts)
            pipe.expire(tmp, TTL_S)
            pipe.rename(tmp, key)
        meta = {"run_id": "test", "computed_at": format_time(int(time.time() * 1000)), "total": sum(counts.values())}
        pipe.hset(keys.exact_meta(region, unit, bucket), mapping=meta)
        pipe.expire(keys.exact_meta(region, unit, bucket), TTL_S)
        pipe.execute()

    def snapshot(self, region: str, window: str, rank: str, tags: list[tuple[str, int]],
                 computed_at_ms: int | None = None) -> dict:
        """A trending snapshot as the materializer writes it (the core's model; entries in the given order)."""
        computed = computed_at_ms or int(time.time() * 1000)
        entries = [TrendEntry(rank=i, tag=tag, display=tag.upper(), count=n, upper_bound=n, lower_bound=max(0, n - 5),
                              source="approx", authors=n, rank_change=None if i == 1 else 1, score=None, baseline=None)
                   for i, (tag, n) in enumerate(tags, start=1)]
        doc = Snapshot(region=region, window=window, rank=rank, computed_at=format_time(computed),
                       computed_at_ms=computed, total=sum(n for _, n in tags), error_bound=5, entries=entries)
        self.client.set(keys.trending(region, window, rank), doc.model_dump_json(), ex=600)
        return doc.model_dump()

    def post(self, tag: str, hour: int, post: TopPost) -> None:
        """A post in the merger's newest and top lists of a tag's hour (bodies inside), added to what is there
        in the merger's order: newest first, and best (score, post id) first."""
        new_key, top_key = keys.PLAIN.merged_new_posts(tag, hour), keys.PLAIN.merged_top_posts(tag, hour)
        newest = [e for e in decode_posts(self.client.get(new_key) or b"[]") if e.post_id != post.post_id]
        top = [e for e in decode_top_posts(self.client.get(top_key) or b"[]") if e.post_id != post.post_id]
        newest = sorted([*newest, NewPost(*post[1:])], key=lambda e: (e.created_ms, e.post_id), reverse=True)
        top = sorted([*top, post], key=lambda e: (e.score, e.post_id), reverse=True)
        self.client.set(new_key, encode_posts(newest), ex=TTL_S)
        self.client.set(top_key, encode_top_posts(top), ex=TTL_S)
