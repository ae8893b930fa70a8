"""A small random post stream for the partition state and merge tests (issue #24)."""

from __future__ import annotations

import zlib

import numpy as np

from speed.aggregate import Increments, aggregate_posts
from speed.state import StateLimits
from trendcore.cms import SketchShape
from trendcore.events import Post
from trendcore.windows import MINUTE_MS

NOW = 1_795_982_405_000
SHAPE = SketchShape(width=211, depth=4)  # narrow: tags share cells
LIMITS = StateLimits(keep_minutes=120, keep_hours=26, candidates=8, posts_per_tag=3)
EVERY_TAG = StateLimits(LIMITS.keep_minutes, LIMITS.keep_hours, candidates=100, posts_per_tag=3)
"""More candidates than the stream has tags: every tag is one from its first step, so its author sketch and
newest posts are complete."""


def posts(count: int, seed: int = 1, tags: int = 40, minutes: int = 180) -> list[Post]:
    """Zipf-like tags (a few heavy, a long tail), 3 regions, 25 authors, created over the last `minutes`."""
    rng = np.random.default_rng(seed)
    made = []
    for i in range(count):
        picked = sorted(set((rng.zipf(1.5, rng.integers(0, 4)) % tags).tolist()))
        text = " ".join(f"#t{t}" for t in picked) + " hello"
        created = NOW - int(rng.integers(0, minutes * MINUTE_MS))
        made.append(Post(f"p{seed}-{i}", f"u{rng.integers(0, 25)}", ["US", "FR", "BR"][i % 3], text, created))
    return made


def steps(stream: list[Post], size: int = 50, limits: StateLimits = LIMITS) -> list[Increments]:
    """The stream cut into steps of `size` posts, each pre-aggregated as the worker does."""
    return [aggregate_posts(stream[i:i + size], frozenset(), NOW, limits.keep_minutes, limits.keep_hours)
            for i in range(0, len(stream), size)]


def split(stream: list[Post], partitions: int) -> list[list[Post]]:
    """The stream split by key (the post id) into partitions, order kept within each."""
    parts: list[list[Post]] = [[] for _ in range(partitions)]
    for post in stream:
        parts[zlib.crc32(post.post_id.encode()) % partitions].append(post)
    return parts
