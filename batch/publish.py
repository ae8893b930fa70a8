"""Publish exact views to Redis: each key is written under a temporary name, then RENAMEd (atomic swap).
The temporary name hashes to its key's slot (KeySpace.staging), so the swap works on Redis Cluster too.

Values are written in sorted order so a re-run produces byte-identical keys (DUMP compares equal).
`exact_meta` stamps every view with the run id, computed_at and a digest of its content.

Large views go through `stage_frame`: the executors write the run's staging keys straight from a
(key, field, value) DataFrame, each key by exactly one task in field order, and the driver only
RENAMEs them (`swap`) and writes the small meta hashes; nothing row-sized reaches the driver.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple

import pyarrow as pa

from adapters import redis as redis_io
from adapters.redis import redis_errors
from trendcore.keys import KeySpace
from trendcore.settings import Settings

CHUNK = 5000
FLUSH_FIELDS = 50_000
"""Executor pipelines are sent every FLUSH_FIELDS fields (bounded memory, few round trips)."""


def _fmt(value: float | int | str) -> str:
    """Counts as integers, scores without float noise, text as is."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return repr(round(float(value), 6))


def digest(fields: Mapping[str, float | int]) -> str:
    """sha256 over the sorted field=value pairs: equal content, equal digest."""
    h = hashlib.sha256()
    for field in sorted(fields):
        h.update(f"{field}={_fmt(fields[field])}\n".encode())
    return h.hexdigest()[:16]


def _swap_hash(pipe, key: str, tmp: str, fields: Mapping[str, float | int], ttl_s: int) -> None:
    """Fill `tmp` in chunks, then RENAME over `key` (an empty view deletes the key)."""
    pipe.delete(tmp)
    items = sorted(fields.items())
    if not items:
        pipe.delete(key)
        return
    for start in range(0, len(items), CHUNK):
        pipe.hset(tmp, mapping={k: _fmt(v) for k, v in items[start : start + CHUNK]})
        if start == 0:
            pipe.expire(tmp, ttl_s)  # a crash half way leaves nothing without a TTL
    redis_io.rename(pipe, tmp, key)


def pattern(key_of: Callable[..., str], *formats: str) -> str:
    """A KeySpace builder as a printf pattern (arguments replaced by `formats`) for `transforms.view_rows`
    (a key prefix holds no `%`)."""
    return key_of(*formats)


def group(rows: Iterable[tuple], width: int = 1) -> dict:
    """Rows (group..., field, value) -> {group: {field: value}}; `width` = number of group columns."""
    out: dict = {}
    for row in rows:
        head = row[0] if width == 1 else tuple(row[:width])
        out.setdefault(head, {})[row[width]] = row[width + 1]
    return out


class Staged(NamedTuple):
    """What staging reports per key: the key, its field count, the sum of its values and their digest."""

    key: str
    rows: int
    total: float
    digest: str


class ViewPrint(NamedTuple):
    """What tells a published count view's content (`transforms.view_fingerprints`), also kept in its meta."""

    rows: int
    total: int
    fingerprint: int


STAGED = pa.schema([("key", pa.string()), ("rows", pa.int64()), ("total", pa.float64()), ("digest", pa.string())])
"""Staged as the Arrow schema the executors report in (same fields, same order)."""


class _KeyStage:
    """One staging key being queued: its fields arrive in order, in any number of pieces, and are
    sent CHUNK at a time from the key's first field (the same commands whatever the Arrow batches)."""

    def __init__(self, pipe, key: str, tmp: str, zset: bool, ttl_s: int) -> None:
        self.pipe, self.key, self.tmp, self.zset, self.ttl_s = pipe, key, tmp, zset, ttl_s
        self.h, self.total, self.rows = hashlib.sha256(), 0, 0
        self.fields: list[str] = []
        self.values: list = []
        pipe.delete(tmp)

    def add(self, fields: list[str], values: list) -> None:
        """Buffer a piece; queue every full chunk."""
        self.fields += fields
        self.values += values
        while len(self.fields) >= CHUNK:
            self._queue(CHUNK)

    def finish(self) -> Staged:
        """Queue the rest; returns what was staged."""
        if self.fields:
            self._queue(len(self.fields))
        return Staged(self.key, self.rows, float(self.total), self.h.hexdigest()[:16])

    def _queue(self, size: int) -> None:
        fields, values = self.fields[:size], self.values[:size]
        del self.fields[:size], self.values[:size]
        texts = list(map(_fmt, values))
        lines = "".join(f"{f}={v}\n" for f, v in zip(fields, texts, strict=True))
        self.h.update(lines.encode())  # the same digest as one update per field
        if self.zset:
            self.pipe.zadd(self.tmp, dict(zip(fields, map(float, values), strict=True)))
        else:
            self.pipe.hset(self.tmp, mapping=dict(zip(fields, texts, strict=True)))
        if not self.rows:
            self.pipe.expire(self.tmp, self.ttl_s)  # a crash half way leaves nothing without a TTL
        self.total += sum(values)
        self.rows += size


def _runs(column: list) -> list[tuple[int, int]]:
    """[start, end) of each run of equal values in a list (none for an empty list)."""
    if not column:
        return []
    starts = [0, *(i for i in range(1, len(column)) if column[i] != column[i - 1])]
    return list(zip(starts, [*starts[1:], len(column)], strict=True))


def stage_writer(settings: Settings, run_id: str, zset: bool, ttl_s: int) -> Callable[[Iterator], Iterator]:
    """The executor side (mapInArrow): a partition's Arrow batches sorted by (key, field) -> staging
    keys; yields one batch of Staged rows. Arrow columns become Python lists in C, with no Row object
    per field: the per-field work left in Python is formatting and queueing."""

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        client, keys = redis_io.client(settings.redis), KeySpace.of(settings)
        pipe, queued, done, current = client.pipeline(transaction=False), 0, [], None
        with redis_errors(f"staging views of run {run_id}"):
            for batch in batches:
                names, fields, values = (batch.column(i).to_pylist() for i in range(3))
                for lo, hi in _runs(names):
                    if current is None or current.key != names[lo]:
                        if current is not None:
                            done.append(current.finish())
                        current = _KeyStage(pipe, names[lo], keys.staging(run_id, names[lo]), zset, ttl_s)
                    current.add(fields[lo:hi], values[lo:hi])
                    queued += hi - lo
                    if queued >= FLUSH_FIELDS:
                        pipe.execute()
                        queued = 0
            if current is not None:
                done.append(current.finish())
            pipe.execute()
        yield pa.RecordBatch.from_pylist([row._asdict() for row in done], schema=STAGED)

    return write


def stage_frame(df, settings: Settings, run_id: str, ttl_s: int, zset: bool = False) -> list[Staged]:
    """Stage a (key, field, value) DataFrame in Redis from the executors; returns what was staged, by key.

    Repartitioning by key and sorting by (key, field) makes each key the work of one task, filled
    in field order: the same bytes on every run. Nothing is visible until `swap` renames the keys.
    """
    redis_io.require_noeviction(redis_io.client(settings.redis), "the batch publish")
    ordered = df.repartition("key").sortWithinPartitions("key", "field")
    from pyspark.sql.pandas.types import from_arrow_schema  # Spark's type for the same schema

    writer = stage_writer(settings, run_id, zset, ttl_s)
    staged = ordered.mapInArrow(writer, from_arrow_schema(STAGED)).collect()
    return sorted(Staged(r["key"], r["rows"], r["total"], r["digest"]) for r in staged)


def swap(settings: Settings, run_id: str, staged: Sequence[str],
         copies: Mapping[str, Sequence[str]] | None = None) -> None:
    """RENAME each staged key over its key (atomic per key); `copies` first duplicates a staged key server-side."""
    keys = KeySpace.of(settings)
    with redis_errors(f"swapping views of run {run_id}"):
        pipe = redis_io.client(settings.redis).pipeline(transaction=False)
        for n, key in enumerate(sorted(staged), start=1):
            for other in (copies or {}).get(key, ()):
                pipe.copy(keys.staging(run_id, key), keys.staging(run_id, other), replace=True)
                redis_io.rename(pipe, keys.staging(run_id, other), other)
            redis_io.rename(pipe, keys.staging(run_id, key), key)
            if n % CHUNK == 0:
                pipe.execute()
        pipe.execute()


def _meta_key(keys: KeySpace, view_key: str) -> str:
    """The key of an exact view's meta hash (both in `keys`)."""
    return keys.exact_meta(*keys.parse_exact(view_key))


def unchanged_views(settings: Settings, prints: Mapping[str, ViewPrint]) -> set[str]:
    """Exact views (key -> rows, total, fingerprint) that Redis already holds with this content: the
    view exists and its meta carries the same rows, total and fingerprint. The daily job recomputes
    24 published hours; only those that late data changed need publishing again."""
    ordered, keys = sorted(prints), KeySpace.of(settings)
    with redis_errors("reading the metas of published exact views"):
        pipe = redis_io.client(settings.redis).pipeline(transaction=False)
        for key in ordered:
            pipe.hmget(_meta_key(keys, key), *ViewPrint._fields)
            pipe.exists(key)
        replies = pipe.execute()
    same = set()
    for key, meta, exists in zip(ordered, replies[::2], replies[1::2], strict=True):  # 2 replies a key
        published = ViewPrint(*(int(v) if v is not None else None for v in meta))
        if exists and published == prints[key]:
            same.add(key)
    return same


def exact_metas(settings: Settings, run_id: str, staged: Sequence[Staged], prints: Mapping[str, ViewPrint]) -> int:
    """Write the meta hash of each staged exact view with its fingerprint from `prints`; returns keys written."""
    now_ms = int(time.time() * 1000)
    ttl, keys = settings.batch.publish_ttl_s, KeySpace.of(settings)
    with redis_errors(f"publishing exact metas of run {run_id}"):
        pipe = redis_io.client(settings.redis).pipeline(transaction=False)
        for view in sorted(staged):
            meta_key = _meta_key(keys, view.key)
            meta = {"run_id": run_id, "computed_at": str(now_ms), "total": str(int(view.total)), "rows": str(view.rows),
                    "digest": view.digest, "fingerprint": str(prints[view.key].fingerprint)}
            _swap_hash(pipe, meta_key, keys.staging(run_id, meta_key), meta, ttl)
        pipe.execute()
    return len(staged)
