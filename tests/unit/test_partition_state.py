"""A partition's in-memory state (issue #24): what a step adds, its bounds, expiry, checkpoints and loading."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import sys
from collections import Counter
from itertools import count
from pathlib import Path

import numpy as np
import pytest

from speed.aggregate import aggregate_posts
from speed.candidates import offer, ranked, trim
from speed.cells import CellCache
from speed.merge import all_packed, merge_authors, merge_newest
from speed.newest import push
from speed.reference import reference_sketches
from speed.state import APPEND, COMPACT_IDLE, Checkpoint, PartitionState, StateLimits, event_key, written
from speed.state_codec import decode_meta, decode_posts, decode_top_posts, encode_post
from tests.unit.state_stream import EVERY_TAG, LIMITS, NOW, SHAPE, posts, steps
from trendcore import hll, sketch_blob
from trendcore.events import Post
from trendcore.hashtags import tag_keys
from trendcore.hll import HyperLogLog
from trendcore.keys import KeySpace, partition_tag
from trendcore.packing import is_packed, pack, unpack
from trendcore.windows import HOUR_MS, MINUTE_MS

KEYS = KeySpace("trends:")
ROOT = Path(__file__).resolve().parents[2]


def _fed(stream: list[Post], limits: StateLimits = LIMITS, store: dict | None = None, size: int = 50,
         partition: int = 3) -> PartitionState:
    """A state fed the stream step by step; with `store`, each step's checkpoint is applied to it (a Redis)."""
    state, cells = PartitionState(SHAPE, limits, KEYS), CellCache(SHAPE)
    for inc in steps(stream, size, limits):
        state.add(inc, cells)
        if store is not None:
            _apply(store, state.checkpoint(partition))
    return state


def _apply(store: dict, checkpoint: Checkpoint) -> None:
    for entry in checkpoint.writes:
        store[entry.key] = written(entry, store.get(entry.key))
    for key in checkpoint.deletes:
        store.pop(key, None)


def _assert_same(a: PartitionState, b: PartitionState) -> None:
    assert a.buckets.keys() == b.buckets.keys()
    for key, bucket in a.buckets.items():
        other = b.buckets[key]
        assert np.array_equal(bucket.counters, other.counters), key
        assert (bucket.total, bucket.candidates) == (other.total, other.candidates), key
    assert {h: {t: s.registers.tobytes() for t, s in by.items()} for h, by in a.authors.items() if by} == \
        {h: {t: s.registers.tobytes() for t, s in by.items()} for h, by in b.authors.items() if by}
    assert {h: by for h, by in a.posts.lists.items() if by} == {h: by for h, by in b.posts.lists.items() if by}
    assert {h: by for h, by in a.top.lists.items() if by} == {h: by for h, by in b.top.lists.items() if by}
    assert a.book.held.keys() == b.book.held.keys()


def test_sketches_and_totals_are_the_reference_sketches():
    stream = posts(600)
    state = _fed(stream)
    mentions: Counter = Counter()
    for post in stream:
        for tag, _ in tag_keys(post.text):
            mentions[(tag, post.region, post.created_at_ms // MINUTE_MS)] += 1
    reference = {key: sketch for key, sketch in reference_sketches(mentions, SHAPE).items()
                 if key[1] == "h" or NOW // MINUTE_MS - key[2] < LIMITS.keep_minutes}
    assert state.buckets.keys() == reference.keys()
    for key, sketch in reference.items():
        assert state.buckets[key].counters.tolist() == list(sketch.counters), key
        assert state.buckets[key].total == sketch.total(), key


def test_candidates_are_bounded_and_ties_go_to_the_smaller_tag():
    candidates: dict[str, int] = {}
    assert offer(candidates, ["b", "a", "c", "d"], np.array([5, 5, 9, 1]), 2) == ["d", "b"]
    assert candidates == {"c": 9, "a": 5}
    assert offer(candidates, ["e", "b"], np.array([4, 5]), 2) == ["b"]  # below the floor: never in; a tie: larger
    assert offer(candidates, ["a", "z"], np.array([7, 8]), 3) == [] and ranked(candidates, 3) == [
        ("c", 9), ("z", 8), ("a", 7)]
    assert trim(candidates, 1) == ["a", "z"] and candidates == {"c": 9}


def test_every_bucket_keeps_at_most_its_candidates_the_best_ones_seen():
    state = _fed(posts(600))
    for bucket in state.buckets.values():
        assert 0 < len(bucket.candidates) <= LIMITS.candidates
        for tag, estimate in bucket.candidates.items():
            assert estimate <= min(bucket.counters[CellCache(SHAPE)(tag)])  # an estimate read at some step


def test_author_sketches_and_lists_exist_only_for_the_worldwide_hour_candidates():
    stream = posts(800)
    state, store, cells, deleted = PartitionState(SHAPE, LIMITS, KEYS), {}, CellCache(SHAPE), set()
    for inc in steps(stream):
        state.add(inc, cells)
        checkpoint = state.checkpoint(3)
        _apply(store, checkpoint)
        deleted.update(checkpoint.deletes)
        for kept in (state.authors, state.posts.lists):
            for hour, by_tag in kept.items():
                assert set(by_tag) <= set(state.buckets[("all", "h", hour)].candidates)
        stored = Counter(KEYS.parse_part(key)[1] for key in store)
        assert stored["hll"] == sum(map(len, state.authors.values()))  # the keys of those that left: deleted
        assert stored["new"] == sum(map(len, state.posts.lists.values()))
    for kind in ("hll", "new"):  # tags left the candidates
        assert any(key.startswith(f"trends:part:{{{partition_tag(3, 4)}}}:{kind}:") for key in deleted)
    authors = {(tag, post.created_at_ms // HOUR_MS): set() for post in stream for tag, _ in tag_keys(post.text)}
    for post in stream:
        for tag, _ in tag_keys(post.text):
            authors[(tag, post.created_at_ms // HOUR_MS)].add(post.user_id)
    heavy = ("t1", NOW // HOUR_MS - 1)  # a candidate from its first step on: every author counted
    assert round(state.authors[heavy[1]][heavy[0]].estimate()) == len(authors[heavy])


def test_a_tail_tag_gets_no_list_a_candidate_does_and_a_list_leaving_is_deleted():
    """Two candidates an hour: #a enters (list and author sketch), #b and #c push it out (both deleted at
    the next checkpoint; #a's later post is not listed), #d stays in the tail (never a list)."""
    limits = dataclasses.replace(LIMITS, candidates=2)
    state, cells, hour, ids = PartitionState(SHAPE, limits, KEYS), CellCache(SHAPE), NOW // HOUR_MS, count()

    def step(*texts: str) -> Checkpoint:  # posts of the current hour, each newer than the one before
        numbers = [next(ids) for _ in texts]
        made = [Post(f"p{n}{text}", f"u{n}", "US", text, hour * HOUR_MS + n) for n, text in zip(numbers, texts,
                                                                                                 strict=True)]
        state.add(aggregate_posts(made, frozenset(), NOW, limits.keep_minutes, limits.keep_hours), cells)
        return state.checkpoint(3)

    new, hll = (lambda tag: KEYS.part_new_posts(3, tag, hour)), (lambda tag: KEYS.part_authors(3, tag, hour))
    first = step("#a")
    assert {new("a"), hll("a")} <= {e.key for e in first.writes} and not first.deletes
    second = step("#b", "#b", "#b", "#c", "#c", "#c")
    assert state.buckets[("all", "h", hour)].candidates == {"b": 3, "c": 3}
    assert set(second.deletes) == {new("a"), hll("a")}
    assert {new("b"), new("c")} <= {e.key for e in second.writes}
    third = step("#d", "#a", "#b")
    assert state.buckets[("all", "h", hour)].candidates == {"b": 4, "c": 3}  # #a (2) and #d (1) below 3
    assert set(state.posts.lists[hour]) == set(state.authors[hour]) == {"b", "c"}
    assert {e.key for e in third.writes} & {new("a"), new("d"), new("b")} == {new("b")} and not third.deletes
    assert [pid for _, pid, _ in state.posts.lists[hour]["b"]] == ["p9#b", "p3#b", "p2#b"]  # newest first


def test_newest_posts_are_bounded_and_carry_their_bodies_shared_between_lists():
    """With every tag a candidate from its first step, each list is the newest posts of its tag and hour."""
    stream = posts(500)
    state = _fed(stream, EVERY_TAG)
    assert {(tag, post.created_at_ms // HOUR_MS) for post in stream for tag, _ in tag_keys(post.text)} == {
        (tag, hour) for hour, by_tag in state.posts.lists.items() for tag in by_tag}
    by_id, bodies = {post.post_id: post for post in stream}, {}
    for hour, by_tag in state.posts.lists.items():
        for tag, kept in by_tag.items():
            assert 0 < len(kept) <= LIMITS.posts_per_tag
            expected = sorted(((p.created_at_ms, p.post_id) for p in stream if p.created_at_ms // HOUR_MS == hour
                               and tag in dict(tag_keys(p.text))), reverse=True)[:LIMITS.posts_per_tag]
            assert [(ms, pid) for ms, pid, _ in kept] == expected
            for _, pid, body in kept:
                post = by_id[pid]
                assert decode_posts(b"[" + body + b"]") == [(post.created_at_ms, pid, post.text, post.region,
                                                              post.user_id)]
                assert bodies.setdefault(pid, body) is body  # one body a post, however many lists hold it
    assert any(len(dict(tag_keys(by_id[pid].text))) > 1 for pid in bodies)


def test_push_ignores_a_post_already_listed_and_says_when_the_list_changed():
    kept: list[tuple[int, str, bytes]] = []
    bodies = {pid: pid.encode() for pid in "abcd"}
    assert push(kept, ["5", "a", "7", "b", "7", "b"], bodies, 2) and kept == [(7, "b", b"b"), (5, "a", b"a")]
    assert push(kept, ["5", "a", "6", "c", "9", "d"], bodies, 2) and kept == [(9, "d", b"d"), (7, "b", b"b")]
    assert not push(kept, ["9", "d"], bodies, 2)
    assert not push(kept, ["1", "c"], bodies, 2) and kept == [(9, "d", b"d"), (7, "b", b"b")]  # too old: no change


def test_expire_drops_old_buckets_lists_bodies_and_their_dirty_entries():
    stream = posts(400)
    state = _fed(stream)
    later = NOW + 70 * MINUTE_MS
    state.expire(later)
    assert all(unit == "h" or later // MINUTE_MS - bucket < LIMITS.keep_minutes
               for _, unit, bucket in state.buckets)
    assert any(unit == "m" for _, unit, _ in state.buckets)
    state.expire(NOW + 30 * HOUR_MS)
    assert not state.buckets and not state.posts.lists and not state.authors
    assert not state.dirty
    assert state.checkpoint(3) == Checkpoint(3, (), ())


def test_checkpoint_keys_carry_the_partition_hash_tag_and_the_bucket_expiry():
    state = _fed(posts(300))
    checkpoint = state.checkpoint(7)
    assert checkpoint.partition == 7 and checkpoint.writes and not state.dirty
    kinds = Counter()
    for entry in checkpoint.writes:
        assert entry.key.startswith(f"trends:part:{{{partition_tag(7, 4)}}}:")
        partition, kind, coords = KEYS.parse_part(entry.key)
        kinds[kind] += 1
        unit, bucket = (coords[1], coords[2]) if kind in ("cms", "meta") else ("h", coords[1])
        assert entry.expire_at_s == LIMITS.expire_at_s(unit, bucket)
    assert kinds["cms"] == kinds["meta"] == len(state.buckets) and kinds["hll"] and kinds["new"]
    assert state.checkpoint(7).writes == ()  # nothing changed since


def test_checkpoint_values_decode():
    state = _fed(posts(300))
    values = {KEYS.parse_part(e.key)[1:]: e.value for e in state.checkpoint(0).writes}
    key = ("all", "h", NOW // HOUR_MS - 1)
    total, candidates = decode_meta(values[("meta", key)])
    assert total == state.buckets[key].total and list(candidates.items()) == list(state.buckets[key].candidates.items())
    plain = values[("new", ("t1", NOW // HOUR_MS - 1))]
    entries = decode_posts(plain)
    assert [(e.created_ms, e.post_id, encode_post(*e)) for e in entries] == state.posts.lists[NOW // HOUR_MS - 1]["t1"]


def test_lists_and_author_sketches_are_written_plain_while_they_change_and_packed_once_they_stop():
    """A list or author sketch that changed is written plain (zlib at every checkpoint of a busy one would cost
    the worker more than the rest of the checkpoint); after COMPACT_IDLE checkpoints without a change it is
    written once more, packed, with the same content inside; then not again."""
    state = _fed(posts(300))
    first = {KEYS.parse_part(e.key)[1:]: e for e in state.checkpoint(0).writes}
    values = {k: e for k, e in first.items() if k[0] in ("new", "top", "hll")}
    assert not any(is_packed(e.value) or hll.is_packed(e.value) for e in values.values())
    later = [[e for e in state.checkpoint(0).writes] for _ in range(COMPACT_IDLE)]
    assert all(not w for w in later[:-1])
    packed = {KEYS.parse_part(e.key)[1:]: e for e in later[-1]}

    def smaller(kind: str, value: bytes) -> bool:
        if kind == "hll":
            return HyperLogLog.from_bytes(value).to_bytes(packed=True) != value
        return len(pack(value)) < len(value)

    shrinks = {k for k, e in values.items() if smaller(k[0], e.value)}
    assert packed.keys() == shrinks
    stays = values.keys() - shrinks  # a list of a post or two, a sketch of a few authors stays plain
    assert {k[0] for k in shrinks} >= {"new", "hll"} and {k[0] for k in stays} >= {"new", "hll"}
    for k, e in packed.items():
        assert e.expire_at_s == values[k].expire_at_s
        if k[0] == "hll":
            assert hll.is_packed(e.value) and HyperLogLog.from_bytes(e.value).to_bytes() == values[k].value
        else:
            assert is_packed(e.value) and unpack(e.value) == values[k].value
    assert state.checkpoint(0).writes == () and not state.unpacked


def test_lists_and_author_sketches_stored_plain_and_packed_load_and_merge_alike():
    """A partition's list or author sketch stored plain (changing, or by an older worker) loads and merges as a
    packed one; loaded plain, it is packed once it stops changing."""
    state = _fed(posts(300))
    plain = {e.key: e.value for e in state.checkpoint(0).writes}
    packed = dict(plain)
    for _ in range(COMPACT_IDLE):
        packed.update({e.key: e.value for e in state.checkpoint(0).writes})
    listed = [k for k in plain if KEYS.parse_part(k)[1] in ("new", "top", "hll") and plain[k] != packed[k]]
    assert {KEYS.parse_part(k)[1] for k in listed} >= {"new", "hll"}
    assert all(packed[k] == (HyperLogLog.from_bytes(plain[k]).to_bytes(packed=True)
                             if KEYS.parse_part(k)[1] == "hll" else pack(plain[k])) for k in listed)
    from_plain = PartitionState.load(plain.items(), SHAPE, LIMITS, KEYS)
    _assert_same(from_plain, PartitionState.load(packed.items(), SHAPE, LIMITS, KEYS))
    key = next(k for k in listed if KEYS.parse_part(k)[1] == "new")
    assert merge_newest([plain[key]], 20) == merge_newest([packed[key]], 20) != []
    key = next(k for k in listed if KEYS.parse_part(k)[1] == "hll")
    assert np.array_equal(merge_authors([plain[key], None]).registers, merge_authors([packed[key]]).registers)
    again = {e.key: e.value for _ in range(COMPACT_IDLE) for e in from_plain.checkpoint(0).writes}
    assert {k: v for k, v in again.items() if KEYS.parse_part(k)[1] in ("new", "top", "hll")} == {
        k: packed[k] for k in listed}


def test_a_merged_list_is_packed_only_once_every_partitions_is():
    """The merger stores a merged list packed when every partition holding one holds it packed: they all
    stopped changing (one still changing, written plain, keeps the merged list plain)."""
    plain = b'[[1,"p1","#x a","US","u1"]]'
    assert all_packed([pack(plain), None, pack(plain)])
    assert not all_packed([pack(plain), plain]) and not all_packed([None, None])


@pytest.mark.parametrize("size", [20, 1_000])
def test_loading_the_checkpointed_keys_gives_the_same_state(size):
    """Checkpoints applied step after step (writes and deletes) leave keys that load into the same state."""
    store: dict[str, bytes] = {KEYS.part_offset(3, "posts"): b"42"}
    state = _fed(posts(700), store=store, size=size)
    loaded = PartitionState.load(store.items(), SHAPE, LIMITS, KEYS)
    _assert_same(loaded, state)
    bodies: dict[str, bytes] = {}
    for by_tag in loaded.posts.lists.values():
        for kept in by_tag.values():
            assert all(bodies.setdefault(pid, body) is body for _, pid, body in kept)  # one body a post again
    # nothing to write but what the fed state writes too once they stopped changing: sketches with chunks, whole,
    # and lists and author sketches, packed
    compacted = [w for _ in range(COMPACT_IDLE) for w in state.checkpoint(3).writes]
    assert {KEYS.parse_part(e.key)[1] for e in compacted} <= {"cms", "new", "top", "hll"}
    assert all(e.expire_at_s != APPEND for e in compacted)
    assert set(w for _ in range(COMPACT_IDLE) for w in loaded.checkpoint(3).writes) == set(compacted)
    assert loaded.checkpoint(3).writes == () and state.checkpoint(3).writes == ()


def test_load_refuses_keys_of_several_partitions_and_another_precision():
    with pytest.raises(ValueError, match="several partitions"):
        PartitionState.load([(KEYS.part_offset(1, "posts"), b"1"), (KEYS.part_offset(2, "posts"), b"1")],
                            SHAPE, LIMITS, KEYS)
    blob = HyperLogLog(10).to_bytes()
    with pytest.raises(ValueError, match="precision 10"):
        PartitionState.load([(KEYS.part_authors(1, "x", 5), blob)], SHAPE, LIMITS, KEYS)
    with pytest.raises(ValueError, match="not a partition state key"):
        PartitionState.load([(KEYS.cms("US", "m", 1), b"")], SHAPE, LIMITS, KEYS)


def test_the_same_increments_give_byte_identical_checkpoints():
    stream = posts(500)
    first, second = _fed(stream), _fed(stream)
    assert first.checkpoint(2) == second.checkpoint(2)


def test_checkpoints_do_not_depend_on_the_hash_seed():
    """Sets of authors iterate in another order under another PYTHONHASHSEED: the bytes stay the same."""
    code = ("import hashlib; from tests.unit.test_partition_state import _fed; "
            "from tests.unit.state_stream import posts; c = _fed(posts(300)).checkpoint(1); "
            "print(hashlib.sha256(b''.join(e.key.encode() + e.value for e in c.writes)).hexdigest())")
    digests = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                              env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}).stdout
               for seed in ("1", "2")}
    checkpoint = _fed(posts(300)).checkpoint(1)
    local = hashlib.sha256(b"".join(e.key.encode() + e.value for e in checkpoint.writes)).hexdigest()
    assert digests == {local + "\n"}


def test_limits_come_from_the_speed_settings():
    from trendcore.settings.speed import SpeedSettings

    limits = StateLimits.of(SpeedSettings())
    assert dataclasses.astuple(limits) == (120, 26, 500, 20, 12)


# --- engagements: top posts, held bodies, event ids ----------------------------------------------------------

def _engaged_state(stream: list[Post], limits: StateLimits = EVERY_TAG) -> PartitionState:
    return _fed(stream, limits)


def _held_ids(state: PartitionState) -> set[str]:
    """The post ids some list holds (newest or top)."""
    listed = {pid for by_tag in state.posts.lists.values() for kept in by_tag.values() for _, pid, _ in kept}
    return listed | {pid for by_tag in state.top.lists.values() for kept in by_tag.values() for pid in kept}


def test_a_held_posts_engagements_go_to_the_top_lists_of_its_candidate_tags():
    stream = posts(300)
    state = _engaged_state(stream)
    state.checkpoint(3)
    held = sorted(state.book.held)
    a, b = held[0], held[1]
    done = state.engage({a: 3.0, "nobody": 5.0}, {b: {"e1": 10.0, "e2": 20.0}}, known={event_key(b, "e2")})
    assert done.unseen == 1 and done.events == [event_key(b, "e1")]  # e2 was added before: it adds nothing
    state.engage({a: 1.0}, {}, set())
    hour = {p.post_id: p.created_at_ms // HOUR_MS for p in stream}
    text = {p.post_id: p.text for p in stream}
    for pid, score in ((a, 4.0), (b, 10.0)):
        tags = {tag for tag, _ in tag_keys(text[pid])}
        assert {tag for tag, kept in state.top.lists[hour[pid]].items() if pid in kept} == tags
        assert all(state.top.lists[hour[pid]][tag][pid] == score for tag in tags)
    changed = {KEYS.parse_part(e.key)[1:] for e in state.checkpoint(3).writes}
    assert {(kind, coords) for kind, coords in changed} == {
        ("top", (tag, hour[pid])) for pid in (a, b) for tag, _ in tag_keys(text[pid])}


def test_top_lists_keep_the_highest_scores_and_bodies_live_while_a_list_holds_them():
    limits = dataclasses.replace(EVERY_TAG, posts_per_tag=2)
    stream = [Post(f"p{i}", "u", "US", "#solo", NOW - i * 1000) for i in range(6)]
    state = _engaged_state(stream, limits)
    assert set(state.book.held) == {"p0", "p1"}  # the two newest: the others never were held
    state.engage({"p0": 1.0, "p1": 5.0}, {}, set())
    assert state.engage({"p5": 9.0}, {}, set()).unseen == 1  # not held: left to the batch layer
    hour = NOW // HOUR_MS
    assert state.top.lists[hour]["solo"] == {"p0": 1.0, "p1": 5.0}
    later = [Post(f"q{i}", "u", "US", "#solo", NOW + 1000 + i) for i in range(2)]
    state.add(steps(later, 10, limits)[0], CellCache(SHAPE))
    assert {pid for _, pid, _ in state.posts.lists[hour]["solo"]} == {"q0", "q1"}
    assert set(state.book.held) == {"p0", "p1", "q0", "q1"}  # p0 and p1 stay: their top list holds them
    state.engage({"q0": 2.0}, {}, set())
    assert state.top.lists[hour]["solo"] == {"p1": 5.0, "q0": 2.0}  # p0 (1.0) trimmed
    assert set(state.book.held) == {"p1", "q0", "q1"} == _held_ids(state)
    value = decode_top_posts(state.top.value("solo", hour))
    assert [(e.score, e.post_id, e.text) for e in value] == [(5.0, "p1", "#solo"), (2.0, "q0", "#solo")]
    state.expire(NOW + 30 * HOUR_MS)
    assert not state.book.held and not state.top.lists


def test_a_tag_leaving_the_candidates_drops_its_top_list_and_releases_its_posts():
    state = _engaged_state(posts(300))
    hour = next(iter(state.posts.lists))
    tag = next(iter(state.posts.lists[hour]))
    for _, pid, _ in state.posts.lists[hour][tag]:
        state.engage({pid: 1.0}, {}, set())
    assert state.top.lists[hour][tag]
    state.checkpoint(1)
    state._forget(hour, [tag])
    assert tag not in state.top.lists[hour] and tag not in state.posts.lists[hour]
    assert set(state.book.held) == _held_ids(state)
    deleted = {KEYS.parse_part(k)[1:] for k in state.checkpoint(1).deletes}
    assert {("new", (tag, hour)), ("top", (tag, hour))} <= deleted


def test_loading_top_lists_gives_back_scores_and_held_posts():
    store: dict[str, bytes] = {}
    stream = posts(400)
    state = _fed(stream, EVERY_TAG, store=store)
    for i, pid in enumerate(sorted(state.book.held)[:40]):
        state.engage({pid: float(i % 7 + 1)}, {pid: {"e": 0.5}}, set())
    _apply(store, state.checkpoint(3))
    loaded = PartitionState.load(store.items(), SHAPE, EVERY_TAG, KEYS)
    _assert_same(loaded, state)
    assert loaded.top.lists == {h: by for h, by in state.top.lists.items() if by}
    assert {pid: h.score for pid, h in loaded.book.held.items() if h.score} == \
        {pid: h.score for pid, h in state.book.held.items() if h.score}
    assert {pid: h.lists for pid, h in loaded.book.held.items()} == {pid: h.lists for pid, h in state.book.held.items()}
    assert all(KEYS.parse_part(e.key)[1] == "cms" and e.expire_at_s != APPEND  # sketches with chunks, whole
               for e in loaded.checkpoint(3).writes)
    assert loaded.checkpoint(3).writes == ()


def test_a_sketch_written_before_gets_its_changed_cells_appended_until_twice_its_whole_size():
    """A bucket's first checkpoint writes its whole sketch; later ones append a chunk of the cells changed since
    (APPEND), until the stored value would pass twice the last whole write, which starts over. Whatever the
    mix, the stored value reads back as the state's counters, and a pre-chunk blob is rewritten whole first."""
    state, cells, store = PartitionState(SHAPE, LIMITS, KEYS), CellCache(SHAPE), {}
    stream = posts(600, seed=4)
    writes: dict[str, list[str]] = {}
    for inc in steps(stream, 20):
        state.add(inc, cells)
        checkpoint = state.checkpoint(3)
        _apply(store, checkpoint)
        for e in checkpoint.writes:
            if KEYS.parse_part(e.key)[1] == "cms":
                writes.setdefault(e.key, []).append("append" if e.expire_at_s == APPEND else "whole")
    key, kinds = max(writes.items(), key=lambda kv: len(kv[1]))  # the busiest bucket
    assert kinds[0] == "whole" and "append" in kinds and kinds.count("whole") >= 2  # started over at least once
    coords = KEYS.parse_part(key)[2]
    assert len(store[key]) <= 2 * state.buckets[coords].whole
    for name, value in store.items():
        if KEYS.parse_part(name)[1] == "cms":
            assert np.array_equal(sketch_blob.decode(value, SHAPE), state.buckets[KEYS.parse_part(name)[2]].counters)

    counters = state.buckets[coords].counters
    nonzero = np.flatnonzero(counters)
    old = b"S" + nonzero.astype("<u2").tobytes() + counters[nonzero].astype("<u4").tobytes()
    loaded = PartitionState.load([(key, old)], SHAPE, LIMITS, KEYS)
    assert loaded.buckets[coords].stored is None  # not appendable: the next write is whole
    for inc in steps(stream, 600):  # the same posts again: they reach the busiest bucket
        loaded.add(inc, cells)
    assert [e.expire_at_s == APPEND for e in loaded.checkpoint(3).writes if e.key == key] == [False]


def test_a_bucket_that_stops_changing_with_chunks_appended_is_written_whole_once():
    """Redis allocates an appended string twice its length: the COMPACT_IDLE-th checkpoint after a bucket's last
    change writes its sketch whole (its own expiry, the state's counters), once; a change before starts the count
    over. A sketch loaded with chunks is written whole by the first checkpoint."""
    state, cells, store = PartitionState(SHAPE, LIMITS, KEYS), CellCache(SHAPE), {}
    stream = posts(600, seed=4)
    changed: dict[tuple, list[int]] = {}  # bucket -> the checkpoints that wrote its changes
    written: dict[tuple, list[tuple[int, bool]]] = {}  # bucket -> (checkpoint, appended?) of each sketch write

    def checkpoint(n: int, inc=None) -> None:
        if inc is not None:
            state.add(inc, cells)
            for key in inc.sketches:
                changed.setdefault(key, []).append(n)
        done = state.checkpoint(3)
        _apply(store, done)
        for e in done.writes:
            kind, coords = KEYS.parse_part(e.key)[1:]
            if kind == "cms":
                written.setdefault(coords, []).append((n, e.expire_at_s == APPEND))
                assert e.expire_at_s in (APPEND, LIMITS.expire_at_s(*coords[1:]))

    fed = list(steps(stream[:300], 20))
    for n, inc in enumerate(fed):
        checkpoint(n, inc)
    chunked = dict.fromkeys(state.chunked)
    assert chunked, "no bucket had chunks appended"
    loaded_from = {KEYS.part_sketch(3, *k): store[KEYS.part_sketch(3, *k)] for k in chunked}
    later = next(inc for inc in steps(stream[300:], 1) if set(inc.sketches) & set(chunked))
    n = len(fed)
    while state.chunked and n < len(fed) + 4 * COMPACT_IDLE:
        checkpoint(n, later if n == len(fed) + COMPACT_IDLE // 2 else None)  # a late change of a few of them
        n += 1
    assert not state.chunked and state.checkpoint(3).writes == ()

    compactions = 0
    for key, writes in written.items():
        for i, (at, appended) in enumerate(writes):
            if at in changed[key]:
                continue
            compactions += 1  # a write with no change: the bucket's sketch whole, after a chunk, COMPACT_IDLE later
            assert not appended and writes[i - 1][1] and at - max(c for c in changed[key] if c < at) == COMPACT_IDLE
        assert not writes[-1][1], "a bucket left with chunks"
        assert np.array_equal(sketch_blob.decode(store[KEYS.part_sketch(3, *key)], SHAPE), state.buckets[key].counters)
    assert compactions >= len(chunked)

    loaded = PartitionState.load(loaded_from.items(), SHAPE, LIMITS, KEYS)
    assert set(loaded.chunked) == set(chunked)
    assert {e.key for e in loaded.checkpoint(3).writes} == set(loaded_from)
