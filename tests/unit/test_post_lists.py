"""The post lists' format (trendcore.post_lists): entries round-trip, and a kept body costs its own size."""

from __future__ import annotations

import tracemalloc

from trendcore.post_lists import NewPost, decode_posts, encode_post, encode_posts, right_sized


def test_entries_round_trip_in_the_order_given():
    entries = [NewPost(2_000, "p2", "second #b", "DE", "u2"), NewPost(1_000, "p1", "first #a \"q\"", "US", "u1")]
    assert decode_posts(encode_posts(entries)) == entries
    assert encode_posts(entries) == b"[" + b",".join(encode_post(*e) for e in entries) + b"]"


def test_a_kept_body_is_allocated_at_its_own_size():
    """orjson 3.12+ hands back its output in a buffer of at least 4 KiB: 1,000 bodies of about 80 bytes held
    for hours would cost 4 MB instead of about 0.1 MB."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        bodies = [encode_post(1_790_000_000_000, f"p{i}", "a post #about things", "US", f"u{i}") for i in range(1_000)]
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 1_000 * 250, held  # the bytes objects (about 120 B each) and the list, no 4 KiB buffers
    assert bodies[7] == b'[1790000000000,"p7","a post #about things","US","u7"]'


def test_right_sized_keeps_the_bytes():
    blob = b'{"a":[1,2,3]}'
    assert right_sized(blob) == blob and type(right_sized(blob)) is bytes
