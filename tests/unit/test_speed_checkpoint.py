"""The checkpoint pipeline and positioning of the speed worker (issue #24), without Redis or Kafka.

The Redis step itself (speed/checkpoint.lua) runs in tests/integration/test_speed.py; here `ScriptRules`
stands in for it only to drive the pure logic around it: prepare, the refusals, settle, a revocation and a
new owner's positioning, and the payload's layout against the script's own field lists.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import fields

import numpy as np
import pytest

from speed import positioning
from speed.cells import CellCache
from speed.checkpoint import (
    ARGV_FIELDS,
    KEYS_FIELDS,
    PACKED,
    SCRIPT_PATH,
    Checkpointer,
    CheckpointPayload,
    EventIds,
    Loaded,
    Outcome,
    Owned,
    SeenIds,
    fingerprint,
)
from speed.errors import DataLost, StaleBatch
from speed.replay import Replay, parse_marker
from speed.state import PartitionState, event_key, written
from tests.unit.state_stream import LIMITS, NOW, SHAPE, posts, steps
from trendcore.keys import KeySpace, partition_tag

KEYS = KeySpace("trends:")
SCRIPT = SCRIPT_PATH.read_text()
RULES = positioning.StateRules(SHAPE, LIMITS, KEYS, seen_bound=100, posts_topic="posts", event_bound=100)


class ScriptRules:
    """What speed/checkpoint.lua does, on a dict: the stand-in Redis of these pure tests."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}
        self.index: dict[int, set[str]] = {}

    def submit(self, payload: CheckpointPayload) -> None:
        checks = [(payload.offset_key, payload.start, payload.fresh)]
        if payload.pair:
            checks.append((payload.pair_offset_key, payload.pair_start, payload.pair_fresh))
        for key, start, fresh in checks:
            stored = self.values.get(key)
            if stored is not None and (stored != str(start).encode() or fresh):
                Checkpointer.outcome([b"STALE", stored])
            if stored is None and not fresh:
                Checkpointer.outcome([b"LOST"])
        if payload.pair:
            self.values[payload.pair_offset_key] = str(payload.pair_next_offset).encode()
        for key, marker, used in ((payload.replay_key, payload.replay, True),
                                  (payload.pair_replay_key, payload.pair_replay, payload.pair)):
            if used and marker:
                self.values[key] = marker
            elif used:
                self.values.pop(key, None)
        partition = KEYS.parse_part(payload.offset_key)[0]
        live = self.index.setdefault(partition, set())
        for entry in payload.entries:
            self.values[entry.key] = written(entry, self.values.get(entry.key))
            live.add(entry.key)
        for key in payload.deletes:
            self.values.pop(key, None)
            live.discard(key)
        self.values[payload.offset_key] = str(payload.next_offset).encode()
        Checkpointer.outcome([b"OK"])

    def load(self, partition: int, topic: str, now_s: int) -> Loaded:
        offsets = {t: self.values.get(KEYS.part_offset(partition, t)) for t in (topic, "posts", "eng")}
        entries, seen, events = [], [], []
        for key in sorted(self.index.get(partition, ())):
            kind, coords = KEYS.parse_part(key)[1:]
            chunks = {"seen": seen, "events": events}.get(kind)
            if chunks is not None:
                chunks.append((coords[0], self.values[key]))
            else:
                entries.append((key, self.values[key]))
        offsets = {t: int(v) if v is not None else None for t, v in offsets.items()}
        return Loaded(offsets[topic], entries, seen, events, offsets)


def _owned(stored: int = 0, fresh: bool = True) -> Owned:
    return Owned("posts", 3, stored=stored, fresh=fresh, state=PartitionState(SHAPE, LIMITS, KEYS),
                 seen=SeenIds(100))


def _feed(owned: Owned, count: int = 200, seed: int = 1) -> None:
    """Add `count` posts (one offset each) to the partition's state, as the worker does."""
    stream, cells = posts(count, seed=seed), CellCache(SHAPE)
    for inc in steps(stream, 50):
        owned.state.add(inc, cells)
    owned.seen.add([p.post_id for p in stream], owned.next_offset)
    owned.next_offset += count


def _lua_list(name: str) -> list[str]:
    """The names on the script's `-- <name>:` comment line."""
    found = re.search(rf"^-- {name}: (.+)$", SCRIPT, re.MULTILINE)
    assert found, f"no {name} line in {SCRIPT_PATH.name}"
    return found[1].split()


def _lua_locals(table: str) -> list[str]:
    """The locals the script assigns from KEYS[1], KEYS[2], ... (or ARGV), in index order."""
    found = re.search(rf"^local ([\w, ]+) = ({table}\[1\][^\n]*)$", SCRIPT, re.MULTILINE)
    assert found, f"no assignment from {table} in {SCRIPT_PATH.name}"
    names = [n.strip() for n in found[1].split(",")]
    indexes = [int(i) for i in re.findall(rf"{table}\[(\d+)\]", found[2])]
    assert indexes == list(range(1, len(names) + 1))
    return names


def test_the_payload_follows_the_scripts_own_field_lists():
    assert _lua_list("KEYS_FIELDS") == list(KEYS_FIELDS) == _lua_locals("KEYS")
    assert _lua_list("ARGV_FIELDS") == list(ARGV_FIELDS) == _lua_locals("ARGV")
    names = {f.name for f in fields(CheckpointPayload)} | {"writes"}
    assert set(KEYS_FIELDS) | set(ARGV_FIELDS) <= names
    # the values start right after ARGV_FIELDS and the written keys right after KEYS_FIELDS
    assert f"ARGV[{len(ARGV_FIELDS) - 1} + 2 * i]" in SCRIPT and f"KEYS[{len(KEYS_FIELDS)} + i]" in SCRIPT


def test_keys_and_args_are_laid_out_in_the_scripts_order_all_of_one_hash_tag():
    owned = _owned(stored=40, fresh=False)
    _feed(owned)
    payload = Checkpointer(KEYS, 3600).prepare(owned, NOW)
    keys, args = payload.keys(), payload.args()
    # no pair: its keys declared (the same slot), not used
    assert keys[:6] == [KEYS.part_offset(3, "posts"), KEYS.part_index(3), KEYS.part_changed(3),
                        KEYS.part_offset(3, "posts"), KEYS.part_replay(3, "posts"), KEYS.part_replay(3, "posts")]
    assert args[:12] == [40, 0, 240, NOW // 1000, 0, 40, 0, 240, b"", b"", 120, payload.writes]
    assert len(args) == 12 + 2 * payload.writes and len(keys) == 6 + payload.writes + len(payload.deletes)
    assert args[12:14] == [payload.entries[0].value, payload.entries[0].expire_at_s]
    engaged = Owned("eng", 3, stored=5, fresh=True, state=None, seen=None, next_offset=9)
    paired = Checkpointer(KEYS, 3600).prepare(_owned(stored=7), NOW, engaged)
    assert paired.keys()[3] == KEYS.part_offset(3, "eng") and paired.args()[4:8] == [1, 5, 1, 9]
    assert paired.keys()[5] == KEYS.part_replay(3, "eng")
    assert {k.removeprefix("trends:").split(":")[1] for k in keys} == {f"{{{partition_tag(3, 4)}}}"}


def test_prepare_gives_nothing_when_redis_holds_everything():
    owned = _owned(stored=7)
    assert Checkpointer(KEYS, 3600).prepare(owned, NOW) is None
    _feed(owned, 10)
    assert Checkpointer(KEYS, 3600).prepare(owned, NOW) is not None


def test_settle_moves_the_start_of_the_next_checkpoint():
    store, checkpointer, owned = ScriptRules(), Checkpointer(KEYS, 3600), _owned(stored=0)
    _feed(owned, 100)
    first = checkpointer.prepare(owned, NOW)
    store.submit(first)
    checkpointer.settle(owned, first, NOW)
    assert (owned.stored, owned.fresh) == (100, False)
    assert owned.pending() and owned.state.unpacked  # only its plain lists, packed once they stop changing
    _feed(owned, 50, seed=2)
    second = checkpointer.prepare(owned, NOW)
    assert (second.start, second.next_offset, second.fresh) == (100, 150, False)
    store.submit(second)


@pytest.mark.parametrize(("reply", "error"), [([b"STALE", b"12"], StaleBatch), ([b"LOST"], DataLost)])
def test_refusals_become_their_errors(reply, error):
    with pytest.raises(error):
        Checkpointer.outcome(reply)
    assert Checkpointer.outcome([b"OK"]) is None


def test_a_revoked_partition_resumes_with_its_new_owner_and_the_zombie_is_refused():
    store, checkpointer = ScriptRules(), Checkpointer(KEYS, 3600)
    old = _owned(stored=0)
    _feed(old, 150)
    payload = checkpointer.prepare(old, NOW)  # the revocation's checkpoint
    store.submit(payload)
    checkpointer.settle(old, payload, NOW)
    new = positioning.position([("posts", 3)], store, lambda missing: pytest.fail(f"origin looked up {missing}"),
                               RULES, NOW)[("posts", 3)]
    assert (new.stored, new.fresh, new.next_offset) == (150, False, 150)
    assert new.state.buckets.keys() == old.state.buckets.keys()
    for key, bucket in old.state.buckets.items():
        assert np.array_equal(bucket.counters, new.state.buckets[key].counters)
        assert bucket.total == new.state.buckets[key].total
    ids = [f"p1-{i}" for i in range(150)]
    assert new.seen.known(ids) == set(ids)  # one chunk, over the bound of 100: the newest chunk is kept whole
    _feed(new, 20, seed=3)
    moved = checkpointer.prepare(new, NOW)
    store.submit(moved)
    checkpointer.settle(new, moved, NOW)
    _feed(old, 30, seed=4)  # the zombie goes on from 150
    with pytest.raises(StaleBatch):
        store.submit(checkpointer.prepare(old, NOW))


def test_a_missing_offset_is_data_lost_unless_the_partition_started_fresh():
    store, checkpointer = ScriptRules(), Checkpointer(KEYS, 3600)
    loaded = _owned(stored=80, fresh=False)
    _feed(loaded, 10)
    with pytest.raises(DataLost):
        store.submit(checkpointer.prepare(loaded, NOW))
    fresh = _owned(stored=80, fresh=True)
    _feed(fresh, 10)
    store.submit(checkpointer.prepare(fresh, NOW))


def test_a_fresh_owner_finding_an_offset_stored_since_it_loaded_is_stale():
    """Two owners both found no offset; the second to write would overwrite the first's state whole."""
    store, checkpointer = ScriptRules(), Checkpointer(KEYS, 3600)
    first, second = _owned(stored=0, fresh=True), _owned(stored=0, fresh=True)
    _feed(first, 10)
    _feed(second, 10, seed=5)
    store.submit(checkpointer.prepare(first, NOW))
    with pytest.raises(StaleBatch):
        store.submit(checkpointer.prepare(second, NOW))


def test_seen_ids_catch_a_resent_post_within_the_bound_and_miss_older_ones():
    seen, checkpointer, written = SeenIds(bound=4), Checkpointer(KEYS, 3600), {}
    for first, ids in ((0, ["a", "b", "c"]), (3, ["d", "e"]), (5, ["f", "g"])):
        seen.add(ids, first)
        chunks, dropped = seen.checkpoint()
        written.update(chunks)
        for offset in dropped:
            del written[offset]
    assert sorted(written) == [3, 5]  # the oldest chunk dropped once the newer ones hold the bound
    assert seen.known("abcdefg") == set("defg")  # "a" re-sent now would count twice: beyond the bound
    again = SeenIds(bound=4)
    again.load([(first, SeenIds.encode(prints)) for first, prints in written.items()])
    assert again.known("abcdefg") == set("defg")
    owned = _owned()
    owned.seen = SeenIds(bound=4)
    owned.seen.add(["x", "y"], 0)
    owned.next_offset = 2
    payload = checkpointer.prepare(owned, NOW)
    assert [(e.key, e.value) for e in payload.entries] == [
        (KEYS.part_seen(3, 0), PACKED + b"".join(fingerprint(i).to_bytes(6, "little") for i in "xy"))]


def test_positioning_widens_to_every_assigned_partition_on_a_new_epoch():
    assigned = [("posts", 0), ("posts", 1), ("eng", 0)]
    assert positioning.widened([("posts", 1)], assigned, "e1", None) == [("posts", 1)]
    assert positioning.widened([("posts", 1)], assigned, "e1", "e1") == [("posts", 1)]
    assert positioning.widened([("posts", 1)], assigned, "e2", "e1") == sorted(assigned)


def test_a_posts_partition_and_its_engagements_partition_are_positioned_together():
    assigned = [("posts", 0), ("posts", 1), ("eng", 0), ("eng", 1), ("other", 1)]
    assert positioning.paired([("posts", 1)], assigned, ("posts", "eng")) == [("eng", 1), ("posts", 1)]
    assert positioning.paired([("eng", 0)], assigned, ("posts", "eng")) == [("eng", 0), ("posts", 0)]
    assert positioning.paired([("eng", 2), ("other", 1)], assigned, ("posts", "eng")) == [("eng", 2), ("other", 1)]


def test_positioning_looks_up_origins_only_for_partitions_without_an_offset():
    store = ScriptRules()
    store.values[KEYS.part_offset(1, "posts")] = b"42"
    asked = []

    def origins(missing):
        asked.extend(missing)
        return {tp: 7 for tp in missing}

    owned = positioning.position([("posts", 1), ("posts", 2), ("eng", 2)], store, origins, RULES, NOW)
    assert asked == [("posts", 2), ("eng", 2)]
    assert [(o.stored, o.fresh) for o in owned.values()] == [(42, False), (7, True), (7, True)]
    assert owned[("eng", 2)].state is None and owned[("posts", 2)].state is not None


def test_cut_skips_what_memory_holds_and_measures_a_gap():
    assert positioning.cut(10, [8, 9, 10, 11]) == positioning.Cut(skip=2, gap=0)
    assert positioning.cut(10, [15, 16]) == positioning.Cut(skip=0, gap=5)
    assert positioning.cut(10, [10]) == positioning.Cut(skip=0, gap=0)


def _engage(posts: Owned, engaged: Owned, events: dict[str, dict[str, float]], count: int) -> None:
    """An engagements step of `count` records routed to the posts partition's state, as the worker does."""
    named = [event_key(pid, eid) for pid, ids in events.items() for eid in ids]
    done = posts.state.engage({}, events, posts.events.known(named))
    posts.events.add(done.events, engaged.next_offset)
    engaged.next_offset += count


def test_a_pair_checkpoint_moves_both_offsets_and_a_new_owner_gets_scores_and_event_ids_back():
    store, checkpointer = ScriptRules(), Checkpointer(KEYS, 3600)
    posts_part, engaged = _owned(stored=0), Owned("eng", 3, stored=0, fresh=True, state=None, seen=None)
    posts_part.events = EventIds(100)
    _feed(posts_part, 150)
    held = sorted(posts_part.state.book.held)[:3]
    _engage(posts_part, engaged, {held[0]: {"e1": 10.0}, held[1]: {"e2": 1.0, "e3": 20.0}}, 4)
    payload = checkpointer.prepare(posts_part, NOW, engaged)
    assert payload.pair and (payload.pair_start, payload.pair_next_offset) == (0, 4)
    assert KEYS.part_events(3, 0) in {e.key for e in payload.entries}
    store.submit(payload)
    checkpointer.settle(posts_part, payload, NOW, engaged)
    assert (engaged.stored, engaged.fresh) == (4, False)
    new = positioning.position([("posts", 3), ("eng", 3)], store, lambda m: pytest.fail(f"origin of {m}"), RULES,
                               NOW)
    assert (new[("eng", 3)].stored, new[("posts", 3)].stored) == (4, 150)
    state = new[("posts", 3)].state
    assert state.book.held[held[0]].score == 10.0 and state.book.held[held[1]].score == 21.0
    assert new[("posts", 3)].events.known([event_key(held[1], "e3"), event_key(held[2], "e3")]) == {
        event_key(held[1], "e3")}
    # a copy of e3 adds nothing; the zombie's pair checkpoint is refused on the engagements offset alone
    _engage(new[("posts", 3)], new[("eng", 3)], {held[1]: {"e3": 20.0}}, 1)
    assert state.book.held[held[1]].score == 21.0
    moved = checkpointer.prepare(new[("posts", 3)], NOW, new[("eng", 3)])
    store.submit(moved)
    _engage(posts_part, engaged, {held[0]: {"e9": 1.0}}, 1)
    with pytest.raises(StaleBatch):
        store.submit(checkpointer.prepare(posts_part, NOW, engaged))


def test_id_chunks_hold_6_bytes_an_id_whatever_the_ids_hold():
    """Post ids and event ids may hold any character (newlines, commas, quotes): chunks carry fingerprints."""
    odd = [event_key("p\n1", "e,2"), event_key("p", 'e"3'), "post\nwith a newline", "x" * 300]
    for kind in (EventIds, SeenIds):
        ids = kind(10)
        ids.add(odd, 7)
        (first, chunk), = ids.checkpoint()[0]
        blob = kind.encode(chunk)
        assert len(blob) == 1 + 6 * len(odd)
        again = kind(10)
        again.load([(first, blob)])
        assert again.known([*odd, "p", "post", "x"]) == set(odd)


def test_chunks_of_8_byte_fingerprints_written_before_still_load():
    """A chunk an older worker wrote (8-byte fingerprints, no PACKED byte) loads as the same ids, for every
    chunk length (1 + 6k bytes is never a multiple of 8)."""
    for n in range(1, 13):
        ids = [f"post-{n}-{i}" for i in range(n)]
        old = b"".join(hashlib.blake2b(i.encode(), digest_size=8).digest() for i in ids)
        seen = SeenIds(100)
        seen.load([(0, old)])
        assert seen.known([*ids, "another"]) == set(ids)
        assert SeenIds.decode(old) == SeenIds.decode(SeenIds.encode([fingerprint(i) for i in ids]))


def test_a_replaying_partition_stores_its_progress_with_each_checkpoint_until_it_reaches_the_target():
    """Positioned with no checkpoint and 300 records to replay: each checkpoint step writes the marker with the
    offset it stores; the step that reaches the target deletes it, and the replay is over."""
    store, checkpointer, owned = ScriptRules(), Checkpointer(KEYS, 3600, replay_ttl_s=60), _owned(stored=0)
    owned.replay = Replay(0, 300)
    marker_key = KEYS.part_replay(3, "posts")
    _feed(owned, 200)
    payload = checkpointer.prepare(owned, NOW)
    assert payload.replay_ttl_s == 60
    store.submit(payload)
    checkpointer.settle(owned, payload, NOW)
    found = parse_marker(store.values.get(marker_key))
    assert (found.from_offset, found.target_offset, found.reached_offset) == (0, 300, 200)
    assert owned.replay == Replay(0, 300)
    _feed(owned, 100, seed=2)
    payload = checkpointer.prepare(owned, NOW)
    assert payload.replay == b""  # this step reaches the target: the marker goes
    store.submit(payload)
    checkpointer.settle(owned, payload, NOW)
    assert marker_key not in store.values and owned.replay is None


def test_a_paired_checkpoint_carries_the_engagements_partitions_marker_too():
    store, checkpointer = ScriptRules(), Checkpointer(KEYS, 3600)
    posts_part = _owned(stored=0)
    _feed(posts_part, 10)
    engaged = Owned("eng", 3, stored=5, fresh=True, state=None, seen=None, next_offset=9, replay=Replay(5, 50))
    payload = checkpointer.prepare(posts_part, NOW, engaged)
    assert payload.replay == b""
    store.submit(payload)
    checkpointer.settle(posts_part, payload, NOW, engaged)
    found = parse_marker(store.values[KEYS.part_replay(3, "eng")])
    assert (found.topic, found.partition, found.reached_offset) == ("eng", 3, 9)
    assert KEYS.part_replay(3, "posts") not in store.values and engaged.replay == Replay(5, 50)


def test_a_step_says_nothing_written_refused_and_leaves_a_refused_partition_unsettled():
    """Checkpointer.step: prepare, submit, settle in one call; a zombie's step comes back REFUSED, unsettled."""
    store, checkpointer, clock = ScriptRules(), Checkpointer(KEYS, 3600), lambda: NOW
    old, new = _owned(stored=0), None
    assert checkpointer.step(store, old, clock).outcome is Outcome.NOTHING
    _feed(old, 120)
    written = checkpointer.step(store, old, clock)
    assert (written.outcome, written.payload.next_offset, old.stored) == (Outcome.WRITTEN, 120, 120)
    assert old.pending() is bool(old.state.unpacked)  # Redis holds every record: only plain lists may wait
    new = positioning.position([("posts", 3)], store, lambda m: pytest.fail(f"origin of {m}"), RULES, NOW)[("posts", 3)]
    _feed(new, 10, seed=5)
    assert checkpointer.step(store, new, clock).outcome is Outcome.WRITTEN
    _feed(old, 30, seed=6)  # the zombie goes on from 120
    refused = checkpointer.step(store, old, clock)
    assert (refused.outcome, refused.reason) == (Outcome.REFUSED, "stored offset is 130")
    assert (old.stored, old.next_offset) == (120, 150)  # not settled: the worker drops it


def test_a_step_whose_offset_vanished_raises_data_lost():
    store, checkpointer, owned = ScriptRules(), Checkpointer(KEYS, 3600), _owned(stored=40, fresh=False)
    _feed(owned, 5)
    with pytest.raises(DataLost):
        checkpointer.step(store, owned, lambda: NOW)


def test_partition_counts_the_merger_cannot_cover_or_that_split_posts_from_engagements_are_named():
    assert positioning.partition_count_problem({"posts": 4, "engagements": 4}, 4) is None
    assert positioning.partition_count_problem({"posts": 2, "engagements": 2}, 4) is None  # empty ones merge to 0
    more = positioning.partition_count_problem({"posts": 6, "engagements": 6}, 4)
    assert "TRENDS_KAFKA__PARTITIONS is 4" in more and "partitions 4..5" in more and "set it to 6" in more
    split = positioning.partition_count_problem({"posts": 4, "engagements": 2}, 4)
    assert "same number of partitions" in split and "posts has 4, engagements has 2" in split
