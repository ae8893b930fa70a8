"""Trending lists: floors, blocklist, rise scoring, rank change and the snapshot document shape."""

from __future__ import annotations

import orjson

from speed.ranking import (
    Rules,
    Scored,
    by_rise,
    by_volume,
    eligible,
    overlaps,
    previous_ranks,
    settled,
    shortlist,
    snapshot,
)
from trendcore.snapshot import Rebuilding, ReplayedPartition, Snapshot, TrendEntry

ROWS = [Scored("a", 100, 50, 90.0), Scored("b", 80, 50, 5.0), Scored("c", 60, 1, 0.0), Scored("d", 5, 9, 0.0)]


def test_floor_and_blocklist():
    assert [r.tag for r in eligible(ROWS, Rules(min_authors=3), blocked={"b"})] == ["a", "d"]


def test_volume_and_rise_orders():
    rules = Rules(top_k=3, min_authors=0, rise_min_count=10)
    assert [r.tag for r, _ in by_volume(ROWS, rules)] == ["a", "b", "c"]
    rise = by_rise(ROWS, rules)
    assert [r.tag for r, _ in rise] == ["c", "b", "a"]  # d is under the minimum count
    assert rise[1][1] == (80 + 5.0) / (5.0 + 10.0)


def test_shortlist_widens_until_top_k_are_eligible():
    """30 brigaded tags (1 author) outnumber everything else: the first 2K looked up are all
    brigaded, yet both lists still fill with K eligible tags, and only as many tags are looked up
    as that needs."""
    rows = [Scored(f"brigade{i:02}", 1000 - i, 0) for i in range(30)] + \
        [Scored(f"real{i:02}", 500 - i, 0) for i in range(40)]
    looked_up: list[list[str]] = []

    def details(short: list[Scored]) -> list[Scored]:
        looked_up.append([r.tag for r in short])
        return [Scored(r.tag, r.count, 1 if r.tag.startswith("brigade") else 7) for r in short]

    rules = Rules(top_k=5, min_authors=3, rise_min_count=10)
    rows_out = shortlist(rows, rules, blocked={"real00"}, details=details)
    assert [r.tag for r, _ in by_volume(rows_out, rules)] == ["real01", "real02", "real03", "real04", "real05"]
    assert len(by_rise(rows_out, rules)) == 5 and all(r.authors == 7 for r in rows_out)
    assert [len(batch) for batch in looked_up] == [10, 10, 20]  # 2K, then 4K, then 8K deep
    assert "real00" not in sum(looked_up, [])  # blocked: never looked up


def test_shortlist_stops_when_the_rows_run_out():
    rows = [Scored(f"t{i}", 100 - i, 0) for i in range(4)]
    out = shortlist(rows, Rules(top_k=10, min_authors=3), set(),
                    lambda short: [Scored(r.tag, r.count, 1) for r in short])
    assert out == []


def _entry(tag: str, rank: int) -> TrendEntry:
    return TrendEntry(rank=rank, tag=tag, display=tag, count=1, upper_bound=1, lower_bound=1, source="approx",
                      authors=3, rank_change=None, score=None, baseline=None)


def _previous(*tags: str) -> Snapshot:
    """A previous snapshot listing `tags` in rank order."""
    entries = [_entry(tag, rank) for rank, tag in enumerate(tags, start=1)]
    return Snapshot(region="all", window="1h", rank="volume", computed_at="2026-11-29T19:59:55.000Z",
                    computed_at_ms=1_795_982_395_000, total=900, error_bound=2, entries=entries)


def test_snapshot_document_and_rank_change():
    previous = previous_ranks(_previous("b", "a"))
    assert previous == {"b": 1, "a": 2} and previous_ranks(None) == {}
    ranked = by_volume(ROWS[:2], Rules(min_authors=0))
    doc = snapshot("all", "1h", "volume", 1_795_982_405_000, 1000, 2, "approx", ranked, previous).model_dump()
    assert doc["computed_at"] == "2026-11-29T20:00:05.000Z" and doc["total"] == 1000
    first, second = doc["entries"]
    assert (first["tag"], first["rank_change"], second["rank_change"]) == ("a", 1, -1)
    assert first["lower_bound"] == 98 and first["upper_bound"] == 100 and first["score"] is None
    assert set(first) == {"rank", "tag", "display", "count", "upper_bound", "lower_bound", "source", "authors",
                          "rank_change", "score", "baseline", "settled"}
    assert doc["rebuilding"] is None


def test_exact_source_has_no_slack():
    doc = snapshot("US", "24h", "rise", 0, 10, 5, "exact", by_rise([Scored("a", 20, 9, 1.0)], Rules()), {})
    assert doc.entries[0].lower_bound == 20 and doc.entries[0].baseline == 1.0


def test_the_stored_json_is_the_snapshot_document_field_for_field():
    """What the materializer writes to Redis: these fields in this order, these JSON values."""
    ranked = by_rise([Scored("a", 20, 9, 1.5, "A")], Rules())
    doc = snapshot("US", "24h", "rise", 1_795_982_405_000, 10, 5, "approx", ranked, {"a": 3})
    stored = orjson.dumps(doc.model_dump())
    assert stored == orjson.dumps({
        "region": "US", "window": "24h", "rank": "rise", "computed_at": "2026-11-29T20:00:05.000Z",
        "computed_at_ms": 1_795_982_405_000, "total": 10, "error_bound": 5,
        "entries": [{"rank": 1, "tag": "a", "display": "A", "count": 20, "upper_bound": 20, "lower_bound": 15,
                     "source": "approx", "authors": 9, "rank_change": 2, "score": round(25 / 11.5, 6),
                     "baseline": 1.5, "settled": True}], "rebuilding": None})
    assert Snapshot.model_validate_json(stored) == doc  # the next round reads it back as it was


def test_authors_never_exceed_the_count_beside_them():
    """The author sketch covers whole hours worldwide: 3,336 authors must not show beside 3,235 posts."""
    ranked = by_volume([Scored("a", 3235, 3336), Scored("b", 50, 12)], Rules())
    entries = {e.tag: e for e in snapshot("all", "1h", "volume", 0, 4000, 3, "approx", ranked, {}).entries}
    assert entries["a"].authors == 3235
    assert entries["b"].authors == 12


def test_overlapping_bounds_share_a_value_ties_included():
    assert overlaps((5, 10), (10, 12)) and overlaps((5, 10), (6, 7)) and overlaps((6, 7), (5, 10))
    assert not overlaps((5, 10), (11, 12)) and not overlaps((11, 12), (5, 10))


def test_an_entry_is_settled_when_neither_neighbour_overlaps_it():
    bounds = [(90, 100), (70, 80), (75, 78), (40, 50), (45, 60), (10, 20)]
    assert settled(bounds) == [True, False, False, False, False, True]
    assert settled([]) == [] and settled([(0, 5)]) == [True]
    assert settled([(5, 5), (5, 5)]) == [False, False]  # a tie is never settled


def test_snapshot_entries_say_whether_their_rank_is_settled():
    """Error 5: 100 [95, 100] and 80 [75, 80] apart; 78 [73, 78] overlaps 80; 60 [55, 60] overlaps neither."""
    rows = [Scored("a", 100, 9), Scored("b", 80, 9), Scored("c", 78, 9), Scored("d", 60, 9)]
    entries = snapshot("all", "1h", "volume", 0, 1000, 5, "approx", by_volume(rows, Rules()), {}).entries
    assert [(e.tag, e.settled) for e in entries] == [("a", True), ("b", False), ("c", False), ("d", True)]
    exact = snapshot("US", "24h", "volume", 0, 1000, 5, "exact", by_volume(rows, Rules()), {}).entries
    assert all(e.settled for e in exact)  # exact counts have no slack: 80 and 78 cannot swap


def test_snapshot_carries_the_rebuilding_summary():
    rebuilding = Rebuilding(partitions=[ReplayedPartition(topic="posts", partition=2, from_offset=0,
                                                          target_offset=100, reached_offset=25)], progress=0.25)
    doc = snapshot("all", "1h", "volume", 0, 10, 1, "approx", [], {}, rebuilding)
    assert doc.model_dump()["rebuilding"] == {"partitions": [{"topic": "posts", "partition": 2, "from_offset": 0,
                                                              "target_offset": 100, "reached_offset": 25}],
                                              "progress": 0.25}
    assert Snapshot.model_validate_json(orjson.dumps(doc.model_dump())) == doc


def test_a_snapshot_written_before_settled_and_rebuilding_still_reads():
    """The materializer reads the previous snapshot back for rank changes: an older one lacks the new fields."""
    old = {"region": "all", "window": "1h", "rank": "volume", "computed_at": "2026-11-29T19:59:55.000Z",
           "computed_at_ms": 1, "total": 1, "error_bound": 0,
           "entries": [{"rank": 1, "tag": "a", "display": "a", "count": 1, "upper_bound": 1, "lower_bound": 1,
                        "source": "approx", "authors": 1, "rank_change": None, "score": None, "baseline": None}]}
    doc = Snapshot.model_validate_json(orjson.dumps(old))
    assert doc.rebuilding is None and doc.entries[0].settled is False
