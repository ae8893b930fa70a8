"""The newest posts per tag and hour (pure): at most `limit` entries a list, newest first.

Newest means the highest (created ms, post id), the order Redis keeps in a sorted set trimmed by
rank: every push, listing and merge uses it. An entry carries its post's body, encoded once a step
(state_codec.encode_post) and shared by every list holding the post: a body lives exactly as long as
some list holds it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping

from speed.posts import PostBook
from speed.state_codec import NewPost, decode_posts, encode_post
from trendcore.events import Post

Kept = list[tuple[int, str, bytes]]
"""A list's (created ms, post id, encoded entry) triples, newest first."""


def push(kept: Kept, flat: list, bodies: Mapping[str, bytes], limit: int) -> bool:
    """Add a step's flat [created ms, post id, ...] entries (speed.state's `_of_candidates`, bodies by post
    id) to `kept` and trim it to the `limit` newest; True when the list changed (a post was added and
    stayed: a late post older than a full list's oldest changes nothing). A post already listed is not
    added again."""
    fresh = dict(zip(flat[1::2], flat[::2], strict=True))
    for entry in kept:
        fresh.pop(entry[1], None)
    if not fresh:
        return False
    kept += [(int(created), post_id, bodies[post_id]) for post_id, created in fresh.items()]
    kept.sort(reverse=True)
    if len(kept) <= limit:
        return True
    del kept[limit:]
    return any(entry[1] in fresh for entry in kept)


def newest(entries: Iterable[NewPost], limit: int) -> list[NewPost]:
    """The `limit` newest of several lists' entries, each post once, newest first."""
    unique = {entry.post_id: entry for entry in entries}
    return heapq.nlargest(limit, unique.values(), key=lambda e: (e.created_ms, e.post_id))


class NewestPosts:
    """Newest-posts lists per hour and tag, for the tags the caller pushes (speed.state: the hour's
    worldwide candidates). Every post a list holds is held in `book` (speed.posts), released when it leaves."""

    def __init__(self, limit: int, book: PostBook | None = None) -> None:
        self.limit = limit
        self.book = book if book is not None else PostBook()
        self.lists: dict[int, dict[str, Kept]] = {}  # hour -> tag -> list

    def add(self, new_posts: dict[tuple[str, int], list], found: dict[str, tuple[Post, list[str]]]) -> list[tuple]:
        """Push a step's flat entries per (tag, hour) (speed.state's `_of_candidates`: those to keep), the posts
        they name in `found` (post id -> post and tags; bodies encoded once each); return the (tag, hour)s
        whose list changed."""
        if not new_posts:
            return []
        bodies = {pid: encode_post(post.created_at_ms, pid, post.text, post.region, post.user_id)
                  for pid, (post, _) in found.items()}
        limit, lists, changed, book = self.limit, self.lists, [], self.book
        for key, flat in new_posts.items():
            tag, hour = key
            by_tag = lists.get(hour)
            if by_tag is None:
                by_tag = lists[hour] = {}
            kept = by_tag.get(tag)
            if kept is None and len(flat) == 2:  # most lists: a tag's first post in the hour
                by_tag[tag] = [(int(flat[0]), flat[1], bodies[flat[1]])]
                changed.append(key)
                entered, left = {flat[1]}, set()
            else:
                kept = by_tag.setdefault(tag, []) if kept is None else kept
                before = {entry[1] for entry in kept}
                if not push(kept, flat, bodies, limit):
                    continue
                changed.append(key)
                after = {entry[1] for entry in kept}
                entered, left = after - before, before - after
            for post_id in entered:
                post, tags = found[post_id]
                book.hold(post_id, post.created_at_ms, bodies[post_id], tags)
            for post_id in left:
                book.release(post_id)
        return changed

    def drop(self, tag: str, hour: int) -> bool:
        """Forget a tag's list of an hour (its posts released); True when there was one."""
        by_tag = self.lists.get(hour)
        kept = by_tag.pop(tag, None) if by_tag is not None else None
        for entry in kept or ():
            self.book.release(entry[1])
        return kept is not None

    def drop_hour(self, hour: int) -> None:
        """Forget every list of an hour."""
        for tag in list(self.lists.get(hour, {})):
            self.drop(tag, hour)
        self.lists.pop(hour, None)

    def value(self, tag: str, hour: int) -> bytes | None:
        """The list as its checkpoint value (= state_codec.encode_posts), None when there is none."""
        kept = self.lists.get(hour, {}).get(tag)
        if not kept:
            return None
        return b"[" + b",".join([entry[2] for entry in kept]) + b"]"

    def load(self, values: Iterable[tuple[str, int, bytes]]) -> None:
        """Put back lists from their (tag, hour, checkpoint value)s, a post in several lists with one body."""
        for tag, hour, value in values:
            kept = []
            for entry in decode_posts(value):
                held = self.book.hold_entry(*entry)
                kept.append((entry.created_ms, entry.post_id, held.body))
            self.lists.setdefault(hour, {})[tag] = kept
