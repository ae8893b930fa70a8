"""batch.day_pass: the daily job's one pass gives the same counts and top posts as the two it replaces."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc

from batch import day_pass, tag_counts, top_n


def day_mentions(seed: int, count: int) -> pa.Table:
    """Mentions of one day over skewed tags; about a third of the posts have no engagement (null score)."""
    rng = random.Random(seed)
    rows = {}
    for _ in range(count):
        post = rng.randrange(count // 2)
        hour = 480_000 + rng.randrange(24)
        row = {"tag": f"t{int(rng.paretovariate(1.1)) % 40}", "region": rng.choice(["eu", "us", "jp"]),
               "user_id": f"u{rng.randrange(300)}", "post_id": f"p{post:05d}", "hour": hour, "day": hour // 24,
               "score": None if post % 3 == 0 else float(post % 7)}
        rows[(row["post_id"], row["tag"])] = row
    return pa.Table.from_pylist(list(rows.values()))


def rows(table: pa.Table, columns: list[str]) -> list[tuple]:
    return sorted(tuple(r[c] for c in columns) for r in table.select(columns).to_pylist())


def test_counts_and_top_posts_equal_the_separate_passes():
    mentions = day_mentions(7, 4000)
    got = day_pass.count_and_rank(mentions, ["hour", "day"], "all", 3)
    assert got.schema == day_pass.SCHEMA
    counts = got.filter(pc.not_equal(got["grain"], day_pass.TOP))
    separate = tag_counts.count(mentions, ["hour", "day"], "all")
    assert rows(counts, tag_counts.SCHEMA.names) == rows(separate, tag_counts.SCHEMA.names)
    scored = mentions.filter(pc.is_valid(mentions["score"]))
    top = got.filter(pc.equal(got["grain"], day_pass.TOP)).rename_columns(
        [{"bucket": "day"}.get(c, c) for c in day_pass.SCHEMA.names])
    separate = top_n.top_posts(scored, 3, "all")
    assert rows(top, top_n.TOP_POSTS_SCHEMA.names) == rows(separate, top_n.TOP_POSTS_SCHEMA.names)


def test_a_post_nobody_engaged_with_is_counted_but_never_ranked():
    mentions = pa.Table.from_pylist([
        {"tag": "a", "region": "eu", "user_id": "u1", "post_id": "p1", "hour": 10, "day": 0, "score": None},
        {"tag": "a", "region": "eu", "user_id": "u2", "post_id": "p2", "hour": 10, "day": 0, "score": 2.0},
    ])
    got = day_pass.count_and_rank(mentions, ["hour", "day"], "all", 5).to_pylist()
    assert {(r["region"], r["grain"], r["mentions"]) for r in got if r["grain"] != "top"} == {
        ("eu", "hour", 2), ("all", "hour", 2), ("eu", "day", 2), ("all", "day", 2)}
    assert sorted((r["region"], r["post_id"], r["rank"]) for r in got if r["grain"] == "top") == [
        ("all", "p2", 1), ("eu", "p2", 1)]
