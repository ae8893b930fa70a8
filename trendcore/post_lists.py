"""The post lists the speed layer keeps and the API reads: JSON arrays whose entries
carry the post's body, so no Redis key per post is needed.

A newest-posts entry is [created ms, post id, text, region, user id] (`NewPost`), a top-posts entry the same
with the post's summed engagement weight in front (`TopPost`). Compact JSON in a fixed order: the same list
always gives the same bytes. A partition's lists (`part:{p<N>}:new:*`, `part:{p<N>}:top:*`) and the merger's
(`postlist:new:*`, `postlist:top:*`) share the format.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import orjson


class NewPost(NamedTuple):
    """One entry of a newest-posts list, with the post's body (what an answer shows)."""

    created_ms: int
    post_id: str
    text: str
    region: str
    user_id: str


def right_sized(blob: bytes) -> bytes:
    """A copy of `blob` in an allocation of its own size, for bytes kept for long. orjson (3.12 and later) returns
    its output in a buffer of at least 4 KiB that it never shrinks: harmless for a value sent and dropped, but a
    post body of 150 bytes held for hours would cost 4 KiB (docs/decisions.md, "orjson's 4 KiB buffers")."""
    return bytes(memoryview(blob))


def encode_post(created_ms: int, post_id: str, text: str, region: str, user_id: str) -> bytes:
    """[created ms, post id, text, region, user id] (a `NewPost`): one entry of a newest-posts value, right-sized
    (the speed layer holds it while a list does)."""
    return right_sized(orjson.dumps((created_ms, post_id, text, region, user_id)))


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


class TopPost(NamedTuple):
    """One entry of a top-posts list: the post's summed engagement weight, then its body."""

    score: float
    created_ms: int
    post_id: str
    text: str
    region: str
    user_id: str


def encode_top_posts(entries: Sequence[TopPost]) -> bytes:
    """The entries in the order given (best first), as a JSON array of [score, created ms, post id, text,
    region, user id] arrays."""
    return orjson.dumps([list(entry) for entry in entries])


def decode_top_posts(blob: bytes) -> list[TopPost]:
    """The entries of a top-posts value; ValueError when it is not one."""
    try:
        return [TopPost(float(score), int(ms), str(pid), str(text), str(region), str(user))
                for score, ms, pid, text, region, user in orjson.loads(blob)]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"not a top-posts value: {exc}") from None
