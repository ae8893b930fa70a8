"""Values of a partition checkpoint's JSON keys (pure): a bucket's meta, a newest-posts and a top-posts list.

Sketches and author sketches have their own binary formats (trendcore.sketch_blob, trendcore.hll); the post
lists' format is trendcore.post_lists (the API reads the merged ones), re-exported here. A partition's lists
are stored plain while they change and packed once they stop (`pack_list`: zlib, about half the bytes); the
merged ones the API reads stay plain JSON.
Compact JSON with a fixed key order: the same state always gives the same bytes.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping

import orjson

from trendcore.post_lists import (
    NewPost,
    TopPost,
    decode_posts,
    decode_top_posts,
    encode_post,
    encode_posts,
    encode_top_posts,
)

__all__ = ["NewPost", "TopPost", "decode_meta", "decode_posts", "decode_top_posts", "encode_meta", "encode_post",
           "encode_posts", "encode_top_posts", "is_packed", "pack_list", "unpack_list"]

LIST_LEVEL = 1
"""zlib's fastest level: a list of 20 generator posts shrinks to 0.52 of its bytes (0.51 at level 6) in about
30 us, paid once a list stops changing (docs/decisions.md)."""


def encode_meta(total: int, candidates: Mapping[str, int]) -> bytes:
    """{"n": total, "c": {tag: estimate, ...}}, the candidates in the mapping's order (the state's insertion
    order: deterministic, and cheaper than ranking them at every checkpoint)."""
    return orjson.dumps({"n": total, "c": candidates})


def decode_meta(blob: bytes) -> tuple[int, dict[str, int]]:
    """(total, {tag: estimate} in the stored order) of a meta value; ValueError when it is not one."""
    doc = orjson.loads(blob)
    try:
        total, candidates = int(doc["n"]), doc["c"]
        if not isinstance(candidates, dict) or not all(type(est) is int for est in candidates.values()):
            raise TypeError("candidates must map tags to integers")
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not a partition bucket meta value: {exc}") from None
    return total, candidates


def pack_list(value: bytes) -> bytes:
    """A partition's post list (JSON) as stored: zlib-compressed. Lists are the state that grows most with
    posts after the seen ids, and their bodies (ids, times, regions, texts) repeat."""
    return zlib.compress(value, LIST_LEVEL)


def unpack_list(blob: bytes) -> bytes:
    """The JSON of a stored partition list; a list stored plain (changing, or written by an older worker) as it
    is."""
    return zlib.decompress(blob) if is_packed(blob) else blob


def is_packed(blob: bytes) -> bool:
    """Whether a stored list is packed: a JSON array starts with `[`, a zlib stream never does (its first byte
    is 0x78 at every level)."""
    return blob[:1] != b"["
