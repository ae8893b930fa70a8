"""batch.top_n against a plain-Python sort: the Arrow ranking of the daily job's top posts."""

from __future__ import annotations

import random
from collections import defaultdict

import pyarrow as pa
import pytest

from batch import top_n


def reference(rows: list[dict], groups: list[str], key, n: int) -> list[dict]:
    """Group, sort with `key`, keep n per group with a 1-based rank."""
    grouped = defaultdict(list)
    for r in rows:
        grouped[tuple(r[g] for g in groups)].append(r)
    out = []
    for members in grouped.values():
        out += [{**r, "rank": i + 1} for i, r in enumerate(sorted(members, key=key)[:n])]
    return out


def scored_rows(seed: int, count: int) -> list[dict]:
    """Mentions with few distinct scores (many ties) over tags of very different sizes and two days."""
    rng = random.Random(seed)
    return [
        {"post_id": f"p{rng.randrange(count * 2):06d}", "tag": f"t{int(rng.paretovariate(1.1)) % 50}",
         "region": rng.choice(["eu", "us", "jp"]), "day": rng.choice([20000, 20001]),
         "score": rng.choice([0.1, 1.0, 1.1, 3.0, 4.5])}
        for _ in range(count)
    ]


def canonical(rows: list[dict]) -> list[tuple]:
    return sorted((r["tag"], r["region"], r["day"], r["rank"], r["post_id"], r["score"]) for r in rows)


@pytest.mark.parametrize("seed,n", [(1, 1), (2, 3), (3, 10)])
def test_top_posts_equal_a_plain_sort_with_ties_broken_by_post_id(seed, n):
    rows = [dict(r) for r in {(r["post_id"], r["tag"]): r for r in scored_rows(seed, 3000)}.values()]

    def order(r):
        return (-r["score"], r["post_id"])

    expected = reference(rows, ["tag", "region", "day"], order, n)
    expected += [{**r, "region": "all"} for r in reference(rows, ["tag", "day"], order, n)]
    got = top_n.top_posts(pa.Table.from_pylist(rows), n, "all")
    assert got.schema == top_n.TOP_POSTS_SCHEMA
    assert canonical(got.to_pylist()) == canonical(expected)


def test_a_group_smaller_than_n_keeps_all_its_rows_ranked():
    table = pa.table({"g": ["a", "b", "a"], "v": [1, 5, 3], "id": ["x", "y", "z"]})
    got = top_n.top_n(table, ["g"], [("v", "descending"), ("id", "ascending")], 5).to_pylist()
    assert sorted((r["g"], r["rank"], r["id"]) for r in got) == [("a", 1, "z"), ("a", 2, "x"), ("b", 1, "y")]


def test_integer_groups_and_an_empty_table():
    table = pa.table({"hour": [7, 7, 8, 7], "tag": ["a", "b", "c", "c"], "mentions": [2, 9, 1, 9]})
    got = top_n.top_n(table, ["hour"], [("mentions", "descending"), ("tag", "ascending")], 2).to_pylist()
    assert [(r["hour"], r["tag"], r["rank"]) for r in got] == [(7, "b", 1), (7, "c", 2), (8, "c", 1)]
    empty = top_n.top_n(table.slice(0, 0), ["hour"], [("mentions", "descending")], 2)
    assert empty.num_rows == 0 and empty.schema.field("rank").type == pa.int32()


def test_group_codes_renumbered_before_they_overflow_give_the_same_ranking(monkeypatch):
    rows = [dict(r) for r in {(r["post_id"], r["tag"]): r for r in scored_rows(4, 2000)}.values()]
    table = pa.Table.from_pylist(rows)
    wide = top_n.top_n(table, ["tag", "region", "day"], top_n.POST_ORDER, 3)
    monkeypatch.setattr(top_n, "CODE_LIMIT", 16)  # forces the renumbering at every column
    narrow = top_n.top_n(table, ["tag", "region", "day"], top_n.POST_ORDER, 3)
    assert narrow.to_pylist() == wide.to_pylist()

