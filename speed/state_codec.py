"""Values of a partition checkpoint's JSON keys (pure): a bucket's meta and a newest-posts list.

Sketches and author sketches have their own binary formats (trendcore.sketch_blob, trendcore.hll).
Compact JSON with a fixed key order: the same state always gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import orjson


class NewPost(NamedTuple):
    """One entry of a newest-posts list, with the post's body (what an answer shows)."""

    created_ms: int
    post_id: str
    text: str
    region: str
    user_id: str


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


def encode_post(created_ms: int, post_id: str, text: str, region: str, user_id: str) -> bytes:
    """[created ms, post id, text, region, user id] (a `NewPost`): one entry of a newest-posts value."""
    return orjson.dumps((created_ms, post_id, text, region, user_id))


def encode_posts(entries: Sequence[NewPost]) -> bytes:
    """The entries in the order given (newest first), as a JSON array of `encode_post` arrays."""
    return b"[" + b",".join(encode_post(*entry) for entry in entries) + b"]"


def decode_posts(blob: bytes) -> list[NewPost]:
    """The entries of a newest-posts value; ValueError when it is not one."""
    try:
        return [NewPost(int(ms), str(pid), str(text), str(region), str(user))
                for ms, pid, text, region, user in orjson.loads(blob)]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"not a newest-posts value: {exc}") from None
