"""Exact mentions and distinct authors per (tag, region, bucket) of a table of mentions, in Arrow.

Pure pyarrow (no Spark): the batch layer shuffles the mentions once by tag and hands each partition
here (`transforms.tag_counts`). Arrow's one-pass hash group-by costs a fraction of Spark's two-phase
hash aggregation on these high-cardinality keys (docs/batch.md), the more so once the strings are
dictionary-encoded to integer codes. Distinct authors do not add up across tables, so every mention
of a tag must be in the same call.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from batch import top_n

SCHEMA = pa.schema(
    [
        ("tag", pa.string()),
        ("region", pa.string()),
        ("grain", pa.string()),
        ("bucket", pa.int64()),
        ("mentions", pa.int64()),
        ("distinct_authors", pa.int64()),
        ("partition_rank", pa.int32()),
    ]
)
"""One row per (tag, region, grain, bucket); `grain` names the bucket column it came from ("hour", "day").
`partition_rank` ranks the row among this call's rows of the same (region, grain, bucket), by mentions
then tag: a tag in the global top n of its bucket has a partition rank of at most n, so a global top n
needs only the rows ranked n or better in every partition (accuracy's top tags, docs/batch.md)."""


def _group(table: pa.Table, keys: list[str], aggregations: dict[str, tuple]) -> pa.Table:
    """Group `table` by `keys`; each aggregation (column, function) lands in the column named by its key."""
    grouped = table.group_by(keys, use_threads=False).aggregate(list(aggregations.values()))
    arrow_names = {f"{col}_{fn}" if col else fn: name for name, (col, fn) in aggregations.items()}  # Arrow's own names
    return grouped.rename_columns([arrow_names.get(c, c) for c in grouped.column_names])


RANK_ORDER = [("mentions", "descending"), ("tag", "ascending")]
"""The order of `partition_rank`: the same as accuracy's top tags (`transforms.top_tags`)."""


def _partition_rank(totals: pa.Table, grain: str, tag_order: pa.Array, regional: bool) -> pa.Array:
    """Each row's rank by mentions, then tag text, among the rows of its (region, bucket)."""
    groups = {"bucket": totals[grain], **({"region": totals["region"]} if regional else {})}
    by = pa.table({**groups, "mentions": totals["mentions"], "tag": tag_order.take(totals["tag"])})
    return pa.array(top_n.ranks(by, list(groups), RANK_ORDER))


def _rows(per_author: pa.Table, keys: list[str], grain: str, names: dict[str, pa.Array],
          region: str | None = None) -> pa.Table:
    """Mentions (summed per-author counts) and distinct authors per `keys`, in SCHEMA: tag and region
    codes turned back into text with `names`; `region` fills that column when the keys have none (worldwide)."""
    totals = _group(per_author, keys, {"mentions": ("n", "sum"), "distinct_authors": ([], "count_all")})

    def constant(value: str) -> pa.Array:
        return pa.repeat(pa.scalar(value, pa.string()), totals.num_rows)

    columns = {
        "tag": names["tag"].take(totals["tag"]),
        "region": names["region"].take(totals["region"]) if region is None else constant(region),
        "grain": constant(grain),
        "bucket": totals[grain],
        "mentions": totals["mentions"],
        "distinct_authors": totals["distinct_authors"],
        "partition_rank": _partition_rank(totals, grain, names["tag_order"], regional=region is None),
    }
    return pa.Table.from_pydict(columns, schema=SCHEMA)


def _encoded(mentions: pa.Table, grains: Sequence[str]) -> tuple[pa.Table, dict[str, pa.Array]]:
    """The mentions with tag, region and user_id as int32 codes, and the texts of the codes: Arrow
    groups integer keys about twice as fast as strings, and the strings are hashed once here."""
    columns, names = {}, {}
    for name in ("tag", "region", "user_id"):
        encoded = mentions[name].dictionary_encode().combine_chunks()
        columns[name], names[name] = encoded.indices, encoded.dictionary
    names["tag_order"] = pc.rank(names["tag"], sort_keys="ascending")  # a tag code's place in text order
    return pa.table({**columns, **{g: mentions[g] for g in grains}}), names


def count(mentions: pa.Table, grains: Sequence[str], worldwide: str) -> pa.Table:
    """Counts of `mentions` (tag, region, user_id and one int64 column per grain) per grain, plus region `worldwide`.

    Mentions are first counted per (tag, region, author, bucket); both the regional and the worldwide
    rows come from those partial counts, as in SQL's two-level COUNT(DISTINCT)."""
    codes, names = _encoded(mentions, grains)
    parts = []
    for grain in grains:
        per_author = _group(codes, ["tag", "region", "user_id", grain], {"n": ([], "count_all")})
        parts.append(_rows(per_author, ["tag", "region", grain], grain, names))
        everywhere = _group(per_author, ["tag", "user_id", grain], {"n": ("n", "sum")})
        parts.append(_rows(everywhere, ["tag", grain], grain, names, region=worldwide))
    return pa.concat_tables(parts) if parts else SCHEMA.empty_table()


def count_batches(batches: Iterable[pa.RecordBatch], grains: Sequence[str], worldwide: str) -> Iterator[pa.RecordBatch]:
    """mapInArrow's side: a whole partition's batches in, its counts out (nothing for an empty partition)."""
    received = list(batches)
    if not received:
        return
    yield from count(pa.Table.from_batches(received), grains, worldwide).to_batches(max_chunksize=100_000)
