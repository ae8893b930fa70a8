"""Values of a partition checkpoint's JSON keys (pure): a bucket's meta, a newest-posts and a top-posts list.

Sketches and author sketches have their own binary formats (trendcore.sketch_blob, trendcore.hll); the post
lists' format is trendcore.post_lists (the API reads the merged ones), re-exported here. Lists and author
sketches are stored plain while they change and packed once they stop (trendcore.packing).
Compact JSON with a fixed key order: the same state always gives the same bytes.
"""

from __future__ import annotations

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
           "encode_posts", "encode_top_posts"]

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
