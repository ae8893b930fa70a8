"""The rank of rows within their groups of an Arrow table, in a given order, and the first n of each.

Pure pyarrow and numpy (no Spark), one numpy lexsort per call. The daily job ranks top posts here
instead of with a Spark window (the scored mentions are shuffled once by tag, and each partition ranks
its regional and worldwide lists), and the Arrow count pass ranks its rows for accuracy's top tags
(`batch.tag_counts`, `partition_rank`); docs/batch.md has the figures.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

CODE_LIMIT = 2**62
"""Group codes stay below this (int64); past it the codes so far are renumbered densely first."""

Order = Sequence[tuple[str, str]]
"""Sort keys inside a group, as pyarrow takes them: (column, "ascending" | "descending")."""


def _column(table: pa.Table, name: str) -> pa.Array:
    column = table[name]
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _is_text(column: pa.Array) -> bool:
    return pa.types.is_string(column.type) or pa.types.is_large_string(column.type)


def _group_codes(table: pa.Table, groups: Sequence[str]) -> np.ndarray:
    """One int64 code per row naming its group: grouping needs equality only, so each column is
    dictionary-encoded and the codes are combined in mixed radix (one sort key instead of several)."""
    combined = np.zeros(table.num_rows, dtype=np.int64)
    for name in groups:
        encoded = _column(table, name).dictionary_encode()
        radix = max(1, len(encoded.dictionary))
        if int(combined.max(initial=0)) >= CODE_LIMIT // radix:  # would overflow: renumber the groups so far densely
            combined = np.unique(combined, return_inverse=True)[1].astype(np.int64)
        combined = combined * radix + encoded.indices.to_numpy()
    return combined


def _sort_key(column: pa.Array, direction: str) -> np.ndarray:
    """A numeric array that sorts ascending like `column` in `direction` (strings by their rank)."""
    values = pc.rank(column, sort_keys="ascending", tiebreaker="dense") if _is_text(column) else column
    values = values.to_numpy().astype(np.float64 if pa.types.is_floating(column.type) else np.int64)
    return -values if direction == "descending" else values


def _ranked(table: pa.Table, groups: Sequence[str], order: Order) -> tuple[np.ndarray, np.ndarray]:
    """(row indices in group-then-`order` order, the 1-based rank of each of those rows in its group)."""
    group = _group_codes(table, groups)
    keys = [_sort_key(_column(table, name), direction) for name, direction in order]
    index = np.lexsort([*reversed(keys), group])  # lexsort's last key is the primary one
    ordered = group[index]
    starts = np.ones(len(index), dtype=bool)
    starts[1:] = ordered[1:] != ordered[:-1]
    position = np.arange(len(index))
    return index, position - np.maximum.accumulate(np.where(starts, position, 0)) + 1


def ranks(table: pa.Table, groups: Sequence[str], order: Order) -> np.ndarray:
    """The 1-based rank of every row of `table` within its group of `groups` by `order`, in table order."""
    index, rank = _ranked(table, groups, order)
    out = np.empty(len(index), dtype=np.int32)
    out[index] = rank
    return out


def top_n(table: pa.Table, groups: Sequence[str], order: Order, n: int) -> pa.Table:
    """The rows of `table` ranked 1..n within each group of `groups` by `order`, with an int32 `rank` column.

    One numpy lexsort over integer group codes and numeric sort keys (strings by rank): several times
    faster than Arrow's multi-column sort with a string key. No column may hold nulls; ties left by
    `order` keep an arbitrary order, so callers end it with a unique column (post_id, tag)."""
    index, rank = _ranked(table, groups, order)
    keep = rank <= n
    return table.take(pa.array(index[keep])).append_column("rank", pa.array(rank[keep].astype(np.int32)))


TOP_POSTS_SCHEMA = pa.schema(
    [
        ("tag", pa.string()),
        ("region", pa.string()),
        ("day", pa.int64()),
        ("rank", pa.int32()),
        ("post_id", pa.string()),
        ("score", pa.float64()),
    ]
)
"""One row per (tag, region, day, rank): what `top_posts` returns."""

POST_ORDER: Order = [("score", "descending"), ("post_id", "ascending")]


def top_posts(scored: pa.Table, n: int, worldwide: str) -> pa.Table:
    """The n best-scored posts per (tag, region, day) and per (tag, day) as region `worldwide`.

    `scored` holds (post_id, tag, region, day, score) with every row of its tags: a post has one
    region, so both rankings come from the same rows."""
    regional = top_n(scored, ["tag", "region", "day"], POST_ORDER, n)
    everywhere = top_n(scored, ["tag", "day"], POST_ORDER, n)
    worldwide_column = pa.repeat(pa.scalar(worldwide, pa.string()), everywhere.num_rows)
    everywhere = everywhere.set_column(everywhere.schema.get_field_index("region"), "region", worldwide_column)
    return pa.concat_tables([t.select(TOP_POSTS_SCHEMA.names).cast(TOP_POSTS_SCHEMA) for t in (regional, everywhere)])
