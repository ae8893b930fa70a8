"""The posts a partition holds and its top-posts lists (pure, issue #24): no Redis key per post.

A post is held while some newest-posts list (speed.newest) or top-posts list (here) of the partition holds it:
its body, its tags and its engagement score live in one `Held` record, counted by the lists holding it and
forgotten with the last one. So memory is bounded by the lists (`speed.posts_per_tag` per tag and hour, for
the hour's worldwide candidates only), never by posts. An engagement reaches its post only while the post is
held (speed.state `engage`); engagements of other posts are left to the batch layer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import orjson

from speed.state_codec import TopPost, decode_top_posts, encode_post
from trendcore.hashtags import tag_keys


@dataclass(slots=True)
class Held:
    """A post some list holds: its body (state_codec.encode_post bytes), tags (counting keys), the summed
    weight of its engagements seen while held, and how many lists hold it."""

    created_ms: int
    body: bytes
    tags: tuple[str, ...]
    score: float = 0.0
    lists: int = 0


class PostBook:
    """The held posts of one partition, by post id, each counted by the lists holding it."""

    def __init__(self) -> None:
        self.held: dict[str, Held] = {}

    def hold(self, post_id: str, created_ms: int, body: bytes, tags: Iterable[str]) -> Held:
        """One more list holds the post (its record made on the first)."""
        held = self.held.get(post_id)
        if held is None:
            held = self.held[post_id] = Held(created_ms, body, tuple(tags))
        held.lists += 1
        return held

    def take(self, post_id: str) -> None:
        """One more list holds a post already held."""
        self.held[post_id].lists += 1

    def release(self, post_id: str) -> None:
        """One list less holds the post; forgotten (body, score) when none does."""
        held = self.held[post_id]
        held.lists -= 1
        if held.lists <= 0:
            del self.held[post_id]

    def hold_entry(self, created_ms: int, post_id: str, text: str, region: str, user_id: str) -> Held:
        """`hold` for a post read back from a checkpointed list (its tags found again in its text)."""
        held = self.held.get(post_id)
        if held is not None:
            held.lists += 1
            return held
        body = encode_post(created_ms, post_id, text, region, user_id)
        return self.hold(post_id, created_ms, body, [tag for tag, _ in tag_keys(text)])


def encode_top(score: float, body: bytes) -> bytes:
    """[score, created ms, post id, text, region, user id]: a post's body with its score in front."""
    return b"[" + orjson.dumps(score) + b"," + body[1:]


class TopPosts:
    """Top-posts lists per hour and tag: at most `limit` posts each, the highest (score, post id) kept, as
    a sorted set trimmed by rank would."""

    def __init__(self, limit: int, book: PostBook) -> None:
        self.limit, self.book = limit, book
        self.lists: dict[int, dict[str, dict[str, float]]] = {}  # hour -> tag -> post id -> score

    def offer(self, tag: str, hour: int, post_id: str, score: float) -> bool:
        """Set a held post's score in the tag's list of the hour; True when the list changed (it entered,
        or its score moved). A full list admits it only above its lowest (score, post id)."""
        kept = self.lists.setdefault(hour, {}).setdefault(tag, {})
        before = kept.get(post_id)
        if before is not None:
            kept[post_id] = score
            return before != score
        if len(kept) >= self.limit:
            worst = min(kept.items(), key=lambda kv: (kv[1], kv[0]))
            if (score, post_id) <= (worst[1], worst[0]):
                return False
            del kept[worst[0]]
            self.book.release(worst[0])
        kept[post_id] = score
        self.book.take(post_id)
        return True

    def drop(self, tag: str, hour: int) -> bool:
        """Forget a tag's list of an hour (its posts released); True when there was one."""
        kept = self.lists.get(hour, {}).pop(tag, None)
        for post_id in kept or ():
            self.book.release(post_id)
        return bool(kept)

    def drop_hour(self, hour: int) -> None:
        """Forget every list of an hour."""
        for tag in list(self.lists.get(hour, {})):
            self.drop(tag, hour)
        self.lists.pop(hour, None)

    def value(self, tag: str, hour: int) -> bytes | None:
        """The list as its checkpoint value, best first (state_codec.decode_top_posts reads it), None when empty."""
        kept = self.lists.get(hour, {}).get(tag)
        if not kept:
            return None
        held = self.book.held
        ranked = sorted(kept.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
        return b"[" + b",".join(encode_top(score, held[pid].body) for pid, score in ranked) + b"]"

    def load(self, values: Iterable[tuple[str, int, bytes]]) -> None:
        """Put back lists from their (tag, hour, checkpoint value)s; a post's score is its highest listed one."""
        for tag, hour, value in values:
            kept = self.lists.setdefault(hour, {}).setdefault(tag, {})
            for entry in decode_top_posts(value):
                held = self.book.hold_entry(*_body_of(entry))
                held.score = max(held.score, entry.score)
                kept[entry.post_id] = entry.score


def _body_of(entry: TopPost) -> tuple[int, str, str, str, str]:
    return entry.created_ms, entry.post_id, entry.text, entry.region, entry.user_id
