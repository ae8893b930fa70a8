"""The daily job's one pass over a partition of the day's scored mentions: tag counts and top posts together.

Pure pyarrow (no Spark). Counting (`batch.tag_counts`) and ranking top posts (`batch.top_n`) both need
every mention of a tag in one place, so the daily job shuffles its scored mentions by tag once and
hands each partition here, instead of shuffling the day twice (docs/batch.md has the figures).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from batch import tag_counts, top_n

TOP = "top"
"""The `grain` of the top-post rows; count rows keep tag_counts' grains ("hour", "day")."""

SCHEMA = pa.schema([*tag_counts.SCHEMA, ("post_id", pa.string()), ("score", pa.float64()), ("rank", pa.int32())])
"""tag_counts.SCHEMA plus the top-post columns: count rows leave post_id, score and rank null; top-post
rows (grain "top", bucket = the day) leave mentions, distinct_authors and partition_rank null."""


def _as_rows(top: pa.Table) -> pa.Table:
    """Top posts (top_n.TOP_POSTS_SCHEMA) in SCHEMA."""
    rows = top.num_rows
    columns = {
        "tag": top["tag"], "region": top["region"], "grain": pa.repeat(pa.scalar(TOP, pa.string()), rows),
        "bucket": top["day"], "mentions": pa.nulls(rows, pa.int64()), "distinct_authors": pa.nulls(rows, pa.int64()),
        "partition_rank": pa.nulls(rows, pa.int32()),
        "post_id": top["post_id"], "score": top["score"], "rank": top["rank"],
    }
    return pa.Table.from_pydict(columns, schema=SCHEMA)


def count_and_rank(mentions: pa.Table, grains: Sequence[str], worldwide: str, n: int) -> pa.Table:
    """Counts per grain (as `tag_counts.count`) and the n best-scored posts per (tag, region, day) and per
    (tag, day) (as `top_n.top_posts`) of `mentions`: tag, region, user_id, post_id, score (null for a
    post nobody engaged with: counted, never ranked) and one int64 column per grain, "day" among them."""
    counts = tag_counts.count(mentions, grains, worldwide)
    counts = counts.append_column("post_id", pa.nulls(counts.num_rows, pa.string()))
    counts = counts.append_column("score", pa.nulls(counts.num_rows, pa.float64()))
    counts = counts.append_column("rank", pa.nulls(counts.num_rows, pa.int32()))
    scored = mentions.filter(pc.is_valid(mentions["score"])).select(["post_id", "tag", "region", "day", "score"])
    return pa.concat_tables([counts, _as_rows(top_n.top_posts(scored, n, worldwide))])


def batches(received: Iterable[pa.RecordBatch], grains: Sequence[str], worldwide: str,
            n: int) -> Iterator[pa.RecordBatch]:
    """mapInArrow's side: a whole partition's batches in, its counts and top posts out."""
    received = list(received)
    if received:
        table = pa.Table.from_batches(received)
        yield from count_and_rank(table, grains, worldwide, n).to_batches(max_chunksize=100_000)
