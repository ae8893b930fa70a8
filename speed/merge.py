"""The merger's arithmetic (pure): the partitions' checkpointed buckets and lists as one (issue #24).

Each partition counts only its own records, so a bucket's sketch is the cell-wise sum of theirs and its
N the sum of theirs; its candidates are the union of theirs, estimated again on the summed sketch. The
newest posts of a tag and hour are the newest of the partitions' lists, its top posts the best of theirs, its
display spelling the one of the oldest post they hold; its authors the union (register maximum) of their author
sketches.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import chain
from typing import TypeVar

import numpy as np

from speed import candidates as cands
from speed.cells import CellCache
from speed.newest import newest
from speed.state_codec import NewPost, TopPost, decode_meta, decode_posts, decode_top_posts
from trendcore.cms import SketchShape
from trendcore.hashtags import tag_keys
from trendcore.hll import HyperLogLog
from trendcore.packing import is_packed, unpack
from trendcore.sketch_blob import merge_sum

K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class MergedBucket:
    """A bucket over every partition: summed counters (u32), N, and the best candidates, best first."""

    counters: np.ndarray
    total: int
    candidates: list[tuple[str, int]]


def merge_buckets(partition_blobs: Iterable[tuple[bytes | None, bytes | None]], shape: SketchShape,
                  candidates: int, cells: Callable[[str], list[int]] | None = None) -> MergedBucket:
    """Merge one bucket from each partition's (sketch blob, meta) pair (None: the partition has none):
    the top `candidates` of the union of their candidates, estimated on the summed sketch."""
    pairs = list(partition_blobs)
    counters = merge_sum((sketch for sketch, _ in pairs), shape)
    total, names = 0, set()
    for _, meta in pairs:
        if meta is not None:
            n, candidates_of = decode_meta(meta)
            total += n
            names.update(candidates_of)
    return MergedBucket(counters, total, _estimated(counters, sorted(names), shape, candidates, cells))


def _estimated(counters: np.ndarray, tags: list[str], shape: SketchShape, limit: int,
               cells: Callable[[str], list[int]] | None) -> list[tuple[str, int]]:
    """The `limit` best of `tags` by their estimate on `counters` (the minimum over their cells)."""
    cells = cells or CellCache(shape)
    matrix = np.array([cells(tag) for tag in tags], dtype=np.intp).reshape(len(tags), shape.depth)
    estimates = counters[matrix].min(axis=1) if tags else np.zeros(0, dtype=np.uint32)
    return cands.ranked(dict(zip(tags, estimates.tolist(), strict=True)), limit)


def merge_newest(partition_lists: Iterable[bytes | None], posts_per_tag: int) -> list[NewPost]:
    """The newest posts of one tag and hour over the partitions' lists (None: none there), newest first."""
    return newest(chain.from_iterable(decode_posts(unpack(blob)) for blob in partition_lists if blob is not None),
                  posts_per_tag)


def merge_lists(lists: Mapping[K, Iterable[bytes | None]], posts_per_tag: int) -> dict[K, list[NewPost]]:
    """`merge_newest` for each (tag, hour) of `lists` (its partitions' values)."""
    return {key: merge_newest(blobs, posts_per_tag) for key, blobs in lists.items()}


def merge_top(partition_lists: Iterable[bytes | None], posts_per_tag: int) -> list[TopPost]:
    """The top posts of one tag and hour over the partitions' lists (None: none there), best (score, post id)
    first: a post is in one partition only (posts are keyed by id), so nothing is summed."""
    entries = {e.post_id: e for blob in partition_lists if blob is not None
               for e in decode_top_posts(unpack(blob))}
    return heapq.nlargest(posts_per_tag, entries.values(), key=lambda e: (e.score, e.post_id))


def display_of(tag: str, newest: list[NewPost], top: list[TopPost]) -> str | None:
    """The display spelling of `tag` in the merged lists: its spelling in the oldest post they hold; None when
    they hold none."""
    posts = sorted([*((e.created_ms, e.post_id, e.text) for e in newest),
                    *((e.created_ms, e.post_id, e.text) for e in top)])
    for _, _, text in posts:
        for key, spelling in tag_keys(text):
            if key == tag:
                return spelling
    return None


def merge_authors(partition_sketches: Iterable[bytes | None]) -> HyperLogLog | None:
    """The union of the partitions' author sketches of one tag and hour; None when no partition has one."""
    merged = None
    for blob in partition_sketches:
        if blob is not None:
            sketch = HyperLogLog.from_bytes(blob)
            if merged is None:
                merged = sketch
            else:
                merged.merge(sketch)
    return merged


def all_packed(partition_lists: Iterable[bytes | None]) -> bool:
    """Whether every partition that holds a list holds it packed: they all stopped changing, so the merged list
    has too and is stored packed (a pure function of the partitions' keys, like the rest of the merge)."""
    present = [blob for blob in partition_lists if blob is not None]
    return bool(present) and all(is_packed(blob) for blob in present)
