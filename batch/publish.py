"""Publish exact views to Redis: each key is written under a temporary name, then RENAMEd (atomic swap).

Values are written in sorted order so a re-run produces byte-identical keys (DUMP compares equal).
`exact_meta` stamps every view with the run id, computed_at and a digest of its content.

Large views go through `stage_frame`: the executors write the run's staging keys straight from a
(key, field, value) DataFrame, each key by exactly one task in field order, and the driver only
RENAMEs them (`swap`) and writes the small meta hashes; nothing row-sized reaches the driver.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from trendcore import keys
from trendcore.settings import Settings
from trends.adapters import redis as redis_io
from trends.adapters.redis import redis_errors

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
    pipe.rename(tmp, key)


def _swap_zset(pipe, key: str, tmp: str, scores: Mapping[str, float], ttl_s: int) -> None:
    pipe.delete(tmp)
    if not scores:
        pipe.delete(key)
        return
    pipe.zadd(tmp, dict(sorted(scores.items())))
    pipe.expire(tmp, ttl_s)
    pipe.rename(tmp, key)


def _meta(run_id: str, computed_at_ms: int, fields: Mapping[str, float | int]) -> dict[str, str]:
    return {
        "run_id": run_id,
        "computed_at": str(computed_at_ms),
        "total": str(sum(int(v) for v in fields.values())),
        "rows": str(len(fields)),
        "digest": digest(fields),
    }


def exact_counts(
    settings: Settings, unit: str, bucket: int, views: Mapping[str, Mapping[str, int]], run_id: str
) -> int:
    """Publish `views` (region -> tag -> exact count) for an hour ('h') or day ('d'); returns keys written."""
    now_ms = int(time.time() * 1000)
    key_of = keys.exact_hour if unit == "h" else keys.exact_day
    ttl = settings.batch.publish_ttl_s
    with redis_errors(f"publishing exact {unit} {bucket}"):
        client = redis_io.client(settings.redis)
        pipe = client.pipeline(transaction=False)
        for region in sorted(views):
            fields = views[region]
            key = key_of(region, bucket)
            _swap_hash(pipe, key, keys.staging(run_id, key), fields, ttl)
            meta_key = keys.exact_meta(region, unit, bucket)
            _swap_hash(pipe, meta_key, keys.staging(run_id, meta_key), _meta(run_id, now_ms, fields) if fields else {}, ttl)
        pipe.execute()
    return 2 * len(views)


def top_posts(settings: Settings, day: int, lists: Mapping[str, Mapping[str, float]], run_id: str) -> int:
    """Publish worldwide top posts per tag of a day (tag -> post id -> score)."""
    ttl = settings.batch.publish_ttl_s
    with redis_errors(f"publishing top posts of day {day}"):
        client = redis_io.client(settings.redis)
        pipe = client.pipeline(transaction=False)
        for n, tag in enumerate(sorted(lists), start=1):
            key = keys.exact_top_posts(tag, day)
            _swap_zset(pipe, key, keys.staging(run_id, key), lists[tag], ttl)
            if n % CHUNK == 0:
                pipe.execute()
        pipe.execute()
    return len(lists)


def baselines(settings: Settings, views: Mapping[tuple[str, int], Mapping[str, float]], run_id: str) -> int:
    """Publish (region, hour of week) -> tag -> expected count."""
    ttl = settings.batch.baseline_ttl_s
    with redis_errors("publishing baselines"):
        client = redis_io.client(settings.redis)
        pipe = client.pipeline(transaction=False)
        for region, how in sorted(views):
            key = keys.baseline(region, how)
            _swap_hash(pipe, key, keys.staging(run_id, key), views[(region, how)], ttl)
        pipe.execute()
    return len(views)


def pattern(key_of: Callable[..., str], *formats: str) -> str:
    """A trendcore.keys function as a printf pattern (arguments replaced by `formats`) for Spark's format_string."""
    return key_of(*formats)


def group(rows: Iterable[tuple], width: int = 1) -> dict:
    """Rows (group..., field, value) -> {group: {field: value}}; `width` = number of group columns."""
    out: dict = {}
    for row in rows:
        head = row[0] if width == 1 else tuple(row[:width])
        out.setdefault(head, {})[row[width]] = row[width + 1]
    return out



def _chunks(rows: Iterable, size: int) -> Iterator[list]:
    """Consecutive lists of `size` rows (the last shorter): Python 3.11 has no itertools.batched."""
    it = iter(rows)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def _stage_key(pipe, tmp: str, rows: Iterable, zset: bool, ttl_s: int) -> tuple[int, float, str, int]:
    """Queue one staging key from its (key, field, value) rows in field order; returns (rows, total, digest, fields queued)."""
    h, total, n = hashlib.sha256(), 0, 0
    pipe.delete(tmp)
    for chunk_no, chunk in enumerate(_chunks(rows, CHUNK)):
        text = [(r[1], _fmt(r[2])) for r in chunk]
        h.update("".join(f"{f}={v}\n" for f, v in text).encode())  # same bytes as one update per field
        mapping = {r[1]: float(r[2]) for r in chunk} if zset else dict(text)
        total += sum(r[2] for r in chunk)
        n += len(chunk)
        pipe.zadd(tmp, mapping) if zset else pipe.hset(tmp, mapping=mapping)
        if chunk_no == 0:
            pipe.expire(tmp, ttl_s)  # a crash half way leaves nothing without a TTL
    return n, total, h.hexdigest()[:16], n


def stage_writer(redis_settings, run_id: str, zset: bool, ttl_s: int) -> Callable[[Iterator], Iterator[tuple]]:
    """The executor side: a partition's rows sorted by (key, field) -> staging keys; yields (key, rows, total, digest)."""

    def write(rows: Iterator) -> Iterator[tuple]:
        client = redis_io.client(redis_settings)
        pipe, queued, out = client.pipeline(transaction=False), 0, []
        with redis_errors(f"staging views of run {run_id}"):
            for key, group in itertools.groupby(rows, key=lambda r: r[0]):
                n, total, digest_, fields = _stage_key(pipe, keys.staging(run_id, key), group, zset, ttl_s)
                out.append((key, n, total, digest_))
                queued += fields
                if queued >= FLUSH_FIELDS:
                    pipe.execute()
                    queued = 0
            pipe.execute()
        return iter(out)

    return write


def stage_frame(df, settings: Settings, run_id: str, ttl_s: int, zset: bool = False) -> list[tuple]:
    """Stage a (key, field, value) DataFrame in Redis from the executors; returns (key, rows, total, digest) per key.

    Repartitioning by key and sorting by (key, field) makes each key the work of one task, filled
    in field order: the same bytes on every run. Nothing is visible until `swap` renames the keys.
    """
    ordered = df.repartition("key").sortWithinPartitions("key", "field")
    return sorted(ordered.rdd.mapPartitions(stage_writer(settings.redis, run_id, zset, ttl_s)).collect())


def swap(settings: Settings, run_id: str, staged: Sequence[str], copies: Mapping[str, Sequence[str]] | None = None) -> None:
    """RENAME each staged key over its key (atomic per key); `copies` first duplicates a staged key server-side."""
    with redis_errors(f"swapping views of run {run_id}"):
        pipe = redis_io.client(settings.redis).pipeline(transaction=False)
        for n, key in enumerate(sorted(staged), start=1):
            for other in (copies or {}).get(key, ()):
                pipe.copy(keys.staging(run_id, key), keys.staging(run_id, other), replace=True)
                pipe.rename(keys.staging(run_id, other), other)
            pipe.rename(keys.staging(run_id, key), key)
            if n % CHUNK == 0:
                pipe.execute()
        pipe.execute()


def exact_metas(settings: Settings, run_id: str, staged: Sequence[tuple]) -> int:
    """Write the meta hash of each staged exact view (key exact:{region}:{unit}:{bucket}); returns keys written."""
    now_ms = int(time.time() * 1000)
    ttl = settings.batch.publish_ttl_s
    with redis_errors(f"publishing exact metas of run {run_id}"):
        pipe = redis_io.client(settings.redis).pipeline(transaction=False)
        for key, rows, total, digest_ in sorted(staged):
            _, region, unit, bucket = key.split(":")
            meta_key = keys.exact_meta(region, unit, int(bucket))
            meta = {"run_id": run_id, "computed_at": str(now_ms), "total": str(int(total)), "rows": str(rows),
                    "digest": digest_}
            _swap_hash(pipe, meta_key, keys.staging(run_id, meta_key), meta, ttl)
        pipe.execute()
    return len(staged)
