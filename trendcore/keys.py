"""The Redis key layout, in one place: the speed layer writes, the batch layer publishes, serving reads.

Every function returns a key name; docs/redis-layout.md describes each value and its TTL.
Units are 'm' (minute bucket) and 'h' (hour bucket); buckets are epoch-based indexes
(trendcore.windows); region is an ISO code or 'all'.
"""

from __future__ import annotations


def cms(region: str, unit: str, bucket: int) -> str:
    """Count-min sketch: a string of u32 counters (BITFIELD), one per (region, bucket)."""
    return f"cms:{region}:{unit}:{bucket}"


def total(region: str, unit: str, bucket: int) -> str:
    """N of a bucket: mentions added to its sketch (INCRBY), for the eps * N bound."""
    return f"total:{region}:{unit}:{bucket}"


def candidates(region: str, unit: str, bucket: int) -> str:
    """Sorted set of candidate tags of a bucket, score = estimated count, trimmed to a fixed size."""
    return f"cand:{region}:{unit}:{bucket}"


def authors(tag: str, hour: int) -> str:
    """HyperLogLog of distinct authors of a tag in an hour (worldwide)."""
    return f"hll:{tag}:h:{hour}"


def top_posts(tag: str, hour: int) -> str:
    """Sorted set of post ids by weighted engagement in an hour, trimmed."""
    return f"posts:top:{tag}:h:{hour}"


def new_posts(tag: str, hour: int) -> str:
    """Sorted set of post ids by created_at (ms) in an hour, trimmed."""
    return f"posts:new:{tag}:h:{hour}"


def post(post_id: str) -> str:
    """Hash of a post's fields (text, region, user_id, created_at) for top/new post answers."""
    return f"post:{post_id}"


def post_id_of(key: str) -> str:
    """The post id of a `post()` key (its inverse)."""
    if not key.startswith("post:"):
        raise ValueError(f"{key!r} is not a post key")
    return key[len("post:"):]


def display(hour: int) -> str:
    """Hash tag -> display spelling (first seen in that hour)."""
    return f"display:h:{hour}"


def offset(group: str, topic: str, partition: int) -> str:
    """Next offset to apply for a partition, written in the same atomic step as its increments."""
    return f"offsets:{group}:{topic}:{partition}"


def epoch(group: str) -> str:
    """Sentinel written when a consumer group first applies data; its absence means Redis lost data."""
    return f"epoch:{group}"


def trending(region: str, window: str, rank: str) -> str:
    """The materialized trending snapshot (JSON bytes) of a region, window (1h|24h) and rank (volume|rise)."""
    return f"trending:{region}:{window}:{rank}"


def exact_hour(region: str, hour: int) -> str:
    """Hash tag -> exact mention count of a closed hour, published by the batch layer."""
    return f"exact:{region}:h:{hour}"


def exact_day(region: str, day: int) -> str:
    """Hash tag -> exact mention count of a closed UTC day, published by the batch layer."""
    return f"exact:{region}:d:{day}"


def parse_exact(key: str) -> tuple[str, str, int]:
    """(region, unit, bucket) of an `exact_hour()` or `exact_day()` key (their inverse)."""
    kind, region, unit, bucket = key.split(":")
    if kind != "exact" or unit not in ("h", "d"):
        raise ValueError(f"{key!r} is not an exact view key")
    return region, unit, int(bucket)


def exact_meta(region: str, unit: str, bucket: int) -> str:
    """Hash describing a published exact view: job run id, computed_at, total, row count."""
    return f"exact_meta:{region}:{unit}:{bucket}"


def exact_top_posts(tag: str, day: int) -> str:
    """Sorted set post id -> engagement score of a closed day, published by the batch layer."""
    return f"exact_posts:{tag}:d:{day}"


def baseline(region: str, hour_of_week: int) -> str:
    """Hash tag -> expected mentions for a region and hour of week (0 = Monday 00:00 UTC)."""
    return f"baseline:{region}:how:{hour_of_week}"


def parse_baseline(key: str) -> tuple[str, int]:
    """(region, hour of week) of a `baseline()` key (its inverse)."""
    kind, region, how, hour_of_week = key.split(":")
    if kind != "baseline" or how != "how":
        raise ValueError(f"{key!r} is not a baseline key")
    return region, int(hour_of_week)


def staging(run_id: str, key: str) -> str:
    """Where the batch layer writes a view before RENAMEing it over `key` (atomic swap)."""
    return f"tmp:{run_id}:{key}"


BLOCKLIST = "blocklist"
"""Set of tag keys that never trend."""

BATCH_STATUS = "ops:batch"
"""Hash `{job}:last_success_ms` / `{job}:failures` per batch job (BatchJobFailing alert), and
`{job}:last_success_started_ms` (the exact DAGs' `archived` sensor reads it for `archive`)."""

ACCURACY = "ops:accuracy"
"""Hash region -> max error / (eps * N) of the newest compared hour, for the SpeedExactDrift alert."""
