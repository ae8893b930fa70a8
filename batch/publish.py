"""Publish exact views to Redis: each key is written under a temporary name, then RENAMEd (atomic swap).

Values are written in sorted order so a re-run produces byte-identical keys (DUMP compares equal).
`exact_meta` stamps every view with the run id, computed_at and a digest of its content.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Mapping


from trendcore import keys
from trendcore.settings import Settings
from trends.adapters import redis as redis_io
from trends.adapters.redis import redis_errors

CHUNK = 5000


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


def group(rows: Iterable[tuple], width: int = 1) -> dict:
    """Rows (group..., field, value) -> {group: {field: value}}; `width` = number of group columns."""
    out: dict = {}
    for row in rows:
        head = row[0] if width == 1 else tuple(row[:width])
        out.setdefault(head, {})[row[width]] = row[width + 1]
    return out

