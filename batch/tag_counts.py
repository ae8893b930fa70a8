"""Exact mentions and distinct authors per (tag, region, bucket) of a table of mentions, in Arrow.

Pure pyarrow (no Spark): the batch layer shuffles the mentions once by tag and hands each partition
here (`transforms.tag_counts`). Arrow's one-pass hash group-by costs a fraction of Spark's two-phase
hash aggregation on these high-cardinality string keys (docs/batch.md). Distinct authors do not add
up across tables, so every mention of a tag must be in the same call.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

SCHEMA = pa.schema(
    [
        ("tag", pa.string()),
        ("region", pa.string()),
        ("grain", pa.string()),
        ("bucket", pa.int64()),
        ("mentions", pa.int64()),
        ("distinct_authors", pa.int64()),
    ]
)
"""One row per (tag, region, grain, bucket); `grain` names the bucket column it came from ("hour", "day")."""


def _group(table: pa.Table, keys: list[str], aggregations: list[tuple]) -> pa.Table:
    return table.group_by(keys, use_threads=False).aggregate(aggregations)


def _totals(per_author: pa.Table, keys: list[str]) -> pa.Table:
    """Sum the per-author counts (mentions) and count the authors (distinct_authors) per `keys`."""
    totals = _group(per_author, keys, [("n", "sum"), ([], "count_all")])
    return totals.rename_columns([{"n_sum": "mentions", "count_all": "distinct_authors"}.get(c, c) for c in totals.column_names])


def _rows(totals: pa.Table, grain: str, region: pa.Array | None = None) -> pa.Table:
    """`totals` in SCHEMA's columns and order; `region` replaces the column when given (worldwide)."""
    n = totals.num_rows
    columns = {
        "tag": totals["tag"],
        "region": region if region is not None else totals["region"],
        "grain": pa.array([grain] * n, pa.string()) if n else pa.array([], pa.string()),
        "bucket": totals[grain],
        "mentions": totals["mentions"],
        "distinct_authors": totals["distinct_authors"],
    }
    return pa.Table.from_pydict(columns, schema=SCHEMA)


def count(mentions: pa.Table, grains: Sequence[str], worldwide: str) -> pa.Table:
    """Counts of `mentions` (tag, region, user_id and one int64 column per grain) per grain, plus region `worldwide`.

    Mentions are first counted per (tag, region, author, bucket); both the regional and the worldwide
    rows come from those partial counts, as in SQL's two-level COUNT(DISTINCT)."""
    parts = []
    for grain in grains:
        per_author = _group(mentions, ["tag", "region", "user_id", grain], [([], "count_all")])
        per_author = per_author.rename_columns(["n" if c == "count_all" else c for c in per_author.column_names])
        parts.append(_rows(_totals(per_author, ["tag", "region", grain]), grain))
        everywhere = _group(per_author, ["tag", "user_id", grain], [("n", "sum")])
        everywhere = everywhere.rename_columns(["n" if c == "n_sum" else c for c in everywhere.column_names])
        worldwide_totals = _totals(everywhere, ["tag", grain])
        region = pc.cast(pa.array([worldwide] * worldwide_totals.num_rows), pa.string())
        parts.append(_rows(worldwide_totals, grain, region))
    return pa.concat_tables(parts) if parts else SCHEMA.empty_table()


def count_batches(batches: Iterable[pa.RecordBatch], grains: Sequence[str], worldwide: str) -> Iterator[pa.RecordBatch]:
    """mapInArrow's side: a whole partition's batches in, its counts out (nothing for an empty partition)."""
    received = list(batches)
    if not received:
        return
    yield from count(pa.Table.from_batches(received), grains, worldwide).to_batches(max_chunksize=100_000)
