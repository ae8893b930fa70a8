"""The batch layer's Arrow counting (batch.tag_counts) against a plain-Python count (and ranking) of the same
mentions."""

from __future__ import annotations

import random
from collections import defaultdict

import pyarrow as pa

from batch import tag_counts

REGIONS = ["US", "GB", "JP"]


def mentions(n: int, seed: int = 7) -> list[dict]:
    """Skewed random mentions: few tags and authors so that groups repeat, over 3 hours of 2 days."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        hour = rng.choice([47, 48, 49])
        rows.append({"tag": f"t{int(rng.random() ** 3 * 30)}", "region": rng.choice(REGIONS),
                     "user_id": f"u{rng.randrange(40)}", "hour": hour, "day": hour // 24})
    return rows


def expected(rows: list[dict], grain: str) -> set[tuple]:
    """(tag, region, grain, bucket, mentions, distinct authors, rank by mentions then tag within the
    region and bucket), regional and worldwide, the obvious way."""
    found: dict[tuple, list] = defaultdict(list)
    for r in rows:
        for region in (r["region"], "all"):
            found[(r["tag"], region, grain, r[grain])].append(r["user_id"])
    buckets: dict[tuple, list] = defaultdict(list)
    for (tag, region, _, bucket), users in found.items():
        buckets[(region, bucket)].append((-len(users), tag))
    rank = {(region, bucket, tag): i + 1 for (region, bucket), tags in buckets.items()
            for i, (_, tag) in enumerate(sorted(tags))}
    return {(*key, len(users), len(set(users)), rank[(key[1], key[3], key[0])]) for key, users in found.items()}


def table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=pa.schema([("tag", pa.string()), ("region", pa.string()),
                                                       ("user_id", pa.string()), ("hour", pa.int64()),
                                                       ("day", pa.int64())]))


def as_set(result: pa.Table) -> set[tuple]:
    return {tuple(r.values()) for r in result.to_pylist()}


def test_counts_equal_a_plain_count_for_both_grains():
    rows = mentions(5_000)
    result = tag_counts.count(table(rows), ["hour", "day"], "all")
    assert result.schema == tag_counts.SCHEMA
    assert as_set(result) == expected(rows, "hour") | expected(rows, "day")
    assert result.num_rows == len(expected(rows, "hour")) + len(expected(rows, "day"))


def test_an_author_repeating_a_tag_in_two_regions_is_one_author_worldwide():
    rows = [{"tag": "t", "region": "US", "user_id": "u1", "hour": 5, "day": 0},
            {"tag": "t", "region": "GB", "user_id": "u1", "hour": 5, "day": 0},
            {"tag": "t", "region": "GB", "user_id": "u2", "hour": 5, "day": 0}]
    result = as_set(tag_counts.count(table(rows), ["hour"], "all"))
    assert result == {("t", "US", "hour", 5, 1, 1, 1), ("t", "GB", "hour", 5, 2, 2, 1),
                      ("t", "all", "hour", 5, 3, 2, 1)}


def test_batches_of_a_partition_are_counted_together_and_an_empty_partition_gives_nothing():
    rows = mentions(3_000, seed=11)
    batches = table(rows).to_batches(max_chunksize=500)
    out = pa.Table.from_batches(list(tag_counts.count_batches(batches, ["day"], "all")))
    assert as_set(out) == expected(rows, "day")
    assert list(tag_counts.count_batches(iter([]), ["day"], "all")) == []
    assert tag_counts.count(table([]), ["hour"], "all").num_rows == 0
