"""Trending lists: floors, blocklist, rise scoring, rank change and the snapshot document shape."""

from __future__ import annotations

from speed.ranking import Rules, Scored, by_rise, by_volume, eligible, previous_ranks, snapshot

ROWS = [Scored("a", 100, 50, 90.0), Scored("b", 80, 50, 5.0), Scored("c", 60, 1, 0.0), Scored("d", 5, 9, 0.0)]


def test_floor_and_blocklist():
    assert [r.tag for r in eligible(ROWS, Rules(min_authors=3), blocked={"b"})] == ["a", "d"]


def test_volume_and_rise_orders():
    rules = Rules(top_k=3, min_authors=0, rise_min_count=10)
    assert [r.tag for r, _ in by_volume(ROWS, rules)] == ["a", "b", "c"]
    rise = by_rise(ROWS, rules)
    assert [r.tag for r, _ in rise] == ["c", "b", "a"]  # d is under the minimum count
    assert rise[1][1] == (80 + 5.0) / (5.0 + 10.0)


def test_snapshot_document_and_rank_change():
    previous = previous_ranks({"entries": [{"tag": "b", "rank": 1}, {"tag": "a", "rank": 2}]})
    ranked = by_volume(ROWS[:2], Rules(min_authors=0))
    doc = snapshot("all", "1h", "volume", 1_795_982_405_000, 1000, 2, "approx", ranked, previous)
    assert doc["computed_at"] == "2026-11-29T20:00:05.000Z" and doc["total"] == 1000
    first, second = doc["entries"]
    assert (first["tag"], first["rank_change"], second["rank_change"]) == ("a", 1, -1)
    assert first["lower_bound"] == 98 and first["upper_bound"] == 100 and first["score"] is None
    assert set(first) == {"rank", "tag", "display", "count", "upper_bound", "lower_bound", "source", "authors",
                          "rank_change", "score", "baseline"}


def test_exact_source_has_no_slack():
    doc = snapshot("US", "24h", "rise", 0, 10, 5, "exact", by_rise([Scored("a", 20, 9, 1.0)], Rules()), {})
    assert doc["entries"][0]["lower_bound"] == 20 and doc["entries"][0]["baseline"] == 1.0
