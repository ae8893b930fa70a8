"""The merger's arithmetic (issue #24): the partitions of a stream split by key merge into the state of one
partition fed the whole stream."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest

from speed.cells import CellCache
from speed.merge import display_of, merge_authors, merge_buckets, merge_lists, merge_newest, merge_top
from speed.state import PartitionState, StateLimits, written
from speed.state_codec import (
    NewPost,
    TopPost,
    decode_meta,
    encode_meta,
    encode_post,
    encode_posts,
    encode_top_posts,
)
from tests.unit.state_stream import EVERY_TAG, LIMITS, SHAPE, posts, split, steps
from trendcore.hashtags import tag_keys
from trendcore.hll import HyperLogLog
from trendcore.keys import KeySpace
from trendcore.packing import unpack
from trendcore.sketch_blob import encode
from trendcore.windows import HOUR_MS

KEYS = KeySpace()


@dataclass
class Fed:
    """A partition fed a stream: its state, its checkpoint's values by (kind, coordinates), the (tag, hour)s
    it saw, and those among them whose tag was a worldwide candidate of the hour after every step from its
    first mention on (so its newest-posts list holds all its posts there)."""

    state: PartitionState
    values: dict[tuple, bytes]
    seen: set[tuple[str, int]]
    complete: set[tuple[str, int]]


def _checkpointed(stream, limits: StateLimits, partition: int) -> Fed:
    state, cells, seen, broken = PartitionState(SHAPE, limits, KEYS), CellCache(SHAPE), set(), set()
    for inc in steps(stream, 40, limits):
        state.add(inc, cells)
        seen.update((tag, post.created_at_ms // HOUR_MS) for post, tags in inc.posts for tag in tags)
        broken.update((tag, hour) for tag, hour in seen if tag not in state.buckets[("all", "h", hour)].candidates)
    values = {KEYS.parse_part(e.key)[1:]: e.value for e in state.checkpoint(partition).writes}
    return Fed(state, values, seen, seen - broken)


STREAM = posts(1_500, seed=5)


def _split_and_whole(limits: StateLimits) -> tuple[list[Fed], Fed, StateLimits]:
    """3 partitions of the stream split by key, and one partition fed all of it."""
    parts = [_checkpointed(part, limits, p) for p, part in enumerate(split(STREAM, 3))]
    return parts, _checkpointed(STREAM, limits, 0), limits


@pytest.fixture(scope="module", params=[LIMITS, EVERY_TAG], ids=["8 candidates", "every tag"])
def split_and_whole(request):
    fed, whole, limits = _split_and_whole(request.param)
    return [f.values for f in fed], whole.state, limits


def test_merged_sketches_and_totals_equal_one_partition_fed_everything(split_and_whole):
    parts, whole, limits = split_and_whole
    for key, bucket in whole.buckets.items():
        merged = merge_buckets([(p.get(("cms", key)), p.get(("meta", key))) for p in parts], SHAPE,
                               limits.candidates)
        assert np.array_equal(merged.counters, bucket.counters), key
        assert merged.total == bucket.total, key
        names = {tag for p in parts if ("meta", key) in p for tag in _candidates(p[("meta", key)])}
        assert {tag for tag, _ in merged.candidates} <= names and len(merged.candidates) == min(
            limits.candidates, len(names))
        cells = CellCache(SHAPE)
        assert all(est == bucket.counters[cells(tag)].min() for tag, est in merged.candidates)
        if limits is EVERY_TAG:
            assert {tag for tag, _ in merged.candidates} == set(bucket.candidates)


def test_merged_candidates_hold_the_heavy_hitters(split_and_whole):
    parts, whole, limits = split_and_whole
    key = max(whole.buckets, key=lambda k: whole.buckets[k].total)
    merged = merge_buckets([(p.get(("cms", key)), p.get(("meta", key))) for p in parts], SHAPE, limits.candidates)
    exact = Counter(tag for post in STREAM if post.created_at_ms // HOUR_MS == key[2]
                    and key[0] in ("all", post.region) for tag, _ in tag_keys(post.text))
    assert key[1] == "h" and {tag for tag, _ in exact.most_common(3)} <= {tag for tag, _ in merged.candidates}


@pytest.mark.parametrize("limits", [LIMITS, EVERY_TAG], ids=["8 candidates", "every tag"])
def test_merged_newest_posts_equal_one_partition_fed_everything_for_tags_candidates_everywhere(limits):
    """Lists are kept only while their tag is a candidate: for a (tag, hour) that was one in every partition
    (and in the whole) from its first mention on, the merged list is the whole's."""
    parts, whole, _ = _split_and_whole(limits)
    everywhere = {key for key in whole.complete if all(key in p.complete or key not in p.seen for p in parts)}
    if limits is EVERY_TAG:
        assert everywhere == whole.seen
    assert len(everywhere) >= 5 and len({tag for tag, _ in everywhere}) >= 3
    lists = {(tag, hour): [p.values.get(("new", (tag, hour))) for p in parts] for tag, hour in everywhere}
    for (tag, hour), entries in merge_lists(lists, limits.posts_per_tag).items():
        kept = whole.state.posts.lists[hour][tag]
        assert [(e.created_ms, e.post_id, encode_post(*e)) for e in entries] == kept


def test_partitions_keep_lists_only_for_their_candidates():
    """With 8 candidates a tail tag has no list anywhere, and the merge of a tag's partition lists holds
    only lists of partitions where it is a candidate."""
    parts, whole, _ = _split_and_whole(LIMITS)
    for fed in (*parts, whole):
        for hour, by_tag in fed.state.posts.lists.items():
            assert by_tag.keys() <= fed.state.buckets[("all", "h", hour)].candidates.keys()
        listed = {coords for kind, coords in fed.values if kind == "new"}
        assert listed < fed.seen and listed == {(t, h) for h, by in fed.state.posts.lists.items() for t in by}


def test_merged_author_sketches_equal_one_partition_fed_everything_when_every_tag_is_a_candidate():
    """(With fewer candidates a partition may miss a tag's first authors: the bound the state states.)"""
    parts, whole, _ = _split_and_whole(EVERY_TAG)
    assert whole.state.authors
    for hour, by_tag in whole.state.authors.items():
        for tag, sketch in by_tag.items():
            merged = merge_authors(p.values.get(("hll", (tag, hour))) for p in parts)
            assert np.array_equal(merged.registers, sketch.registers), (tag, hour)


def test_merging_nothing():
    merged = merge_buckets([(None, None)], SHAPE, 5)
    assert not merged.counters.any() and merged.total == 0 and merged.candidates == []
    assert merge_newest([None, None], 3) == [] and merge_authors([None]) is None


def test_merge_newest_takes_the_newest_by_time_then_post_id_each_post_once():
    first = [NewPost(9, "a", "x", "US", "u"), NewPost(5, "b", "x", "US", "u")]
    second = [NewPost(9, "c", "y", "FR", "v"), NewPost(9, "a", "x", "US", "u"), NewPost(1, "d", "z", "BR", "w")]
    merged = merge_newest([encode_posts(first), None, encode_posts(second)], 3)
    assert [(e.created_ms, e.post_id) for e in merged] == [(9, "c"), (9, "a"), (5, "b")]


def test_merge_buckets_ranks_the_union_by_the_summed_estimates():
    cells = CellCache(SHAPE)
    counters = [np.zeros(SHAPE.cells, dtype=np.uint32) for _ in range(2)]
    for part, counts in zip(counters, ({"a": 5, "b": 4}, {"b": 3, "c": 6}), strict=True):
        for tag, count in counts.items():
            part[cells(tag)] += count
    metas = [encode_meta(9, {"a": 5, "b": 4}), encode_meta(9, {"c": 6})]  # "b" is not a candidate of the 2nd
    merged = merge_buckets(zip((encode(c, SHAPE) for c in counters), metas, strict=True), SHAPE, 2, cells)
    assert merged.total == 18 and merged.candidates == [("b", 7), ("c", 6)]


def test_merge_authors_is_the_union():
    first, second = HyperLogLog(12), HyperLogLog(12)
    first.add(["u1", "u2"])
    second.add(["u2", "u3"])
    assert round(merge_authors([first.to_bytes(), None, second.to_bytes()]).estimate()) == 3


def _candidates(meta: bytes) -> list[str]:
    return list(decode_meta(meta)[1])


def test_merge_top_takes_the_best_scores_then_post_ids():
    first = [TopPost(9.0, 1, "a", "#X", "US", "u"), TopPost(2.0, 2, "b", "#x", "US", "u")]
    second = [TopPost(9.0, 3, "c", "#x", "FR", "v"), TopPost(1.0, 4, "d", "#x", "BR", "w")]
    merged = merge_top([encode_top_posts(first), None, encode_top_posts(second)], 3)
    assert [(e.score, e.post_id) for e in merged] == [(9.0, "c"), (9.0, "a"), (2.0, "b")]
    assert merge_top([None], 3) == []


def test_display_is_the_spelling_in_the_oldest_listed_post():
    newest = [NewPost(9, "a", "go #WorldCup", "US", "u"), NewPost(5, "b", "#worldcup!", "US", "u")]
    top = [TopPost(3.0, 2, "c", "#WORLDCUP and #other", "FR", "v")]
    assert display_of("worldcup", newest, top) == "WORLDCUP"
    assert display_of("worldcup", newest, []) == "worldcup"
    assert display_of("worldcup", [], []) is None


def test_merged_top_lists_equal_one_partition_fed_everything_when_every_tag_is_a_candidate():
    """Engagements routed by post id to the partition of their post: the merged top lists are the whole
    stream's, as long as every tag is a candidate (posts held) and lists are not trimmed."""
    limits = StateLimits(EVERY_TAG.keep_minutes, EVERY_TAG.keep_hours, candidates=100, posts_per_tag=1000)
    weights = {post.post_id: float(i % 11 + 1) for i, post in enumerate(STREAM) if i % 3 == 0 and tag_keys(post.text)}
    parts = split(STREAM, 3)
    fed = [_checkpointed(part, limits, p) for p, part in enumerate(parts)]
    whole = _checkpointed(STREAM, limits, 0)
    for f, part in zip([*fed, whole], [*parts, STREAM], strict=True):
        ids = {post.post_id for post in part}
        assert f.state.engage({pid: w for pid, w in weights.items() if pid in ids}, {}, set()).unseen == 0
        for e in f.state.checkpoint(0).writes:
            f.values[KEYS.parse_part(e.key)[1:]] = written(e, f.values.get(KEYS.parse_part(e.key)[1:]))
    tops = {coords for f in fed for kind, coords in f.values if kind == "top"}
    assert tops == {coords for kind, coords in whole.values if kind == "top"} and tops
    for coords in tops:
        merged = merge_top([f.values.get(("top", coords)) for f in fed], limits.posts_per_tag)
        assert encode_top_posts(merged) == unpack(whole.values[("top", coords)])
