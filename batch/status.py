"""Each batch job's outcome and the newest speed-vs-exact drift, recorded in Redis for /metrics.

Short Spark jobs cannot be scraped, so the API exports these hashes (serving/ops_metrics.py) for
the BatchJobFailing, SpeedExactDrift, SpeedUndercounts and SpeedSketchMissing alerts (ops/alerts.yml).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

from adapters import redis as redis_io
from adapters.redis import redis_errors
from batch.accuracy import AccuracyRow
from trendcore.keys import KeySpace
from trendcore.settings import Settings
from trendcore.windows import bucket_expire_at_s


def _field(job: str, what: str) -> str:
    """A field of the status hash: `{job}:failures`, `{job}:last_success_ms`, `{job}:last_success_started_ms`."""
    return f"{job}:{what}"


@contextmanager
def recorded(settings: Settings, job: str) -> Iterator[None]:
    """Run a job; count a failure (and re-raise) or stamp when its successful run started and ended.

    Wall-clock stamps, for alerts and for `archived_since`: an archive run drains what Kafka held when it
    started, so its start time is how far the archive is known to be complete.
    """
    client, status = redis_io.client(settings.redis), KeySpace.of(settings).batch_status
    started_ms = int(time.time() * 1000)
    try:
        yield
    except Exception:
        with redis_errors(f"recording a failure of {job}"):
            client.hincrby(status, _field(job, "failures"), 1)
        raise
    with redis_errors(f"recording a success of {job}"):
        client.hset(status, mapping={_field(job, "last_success_ms"): int(time.time() * 1000),
                                     _field(job, "last_success_started_ms"): started_ms})


def archived_since(settings: Settings, since_ms: int) -> bool:
    """True once an archive run that started at or after `since_ms` has succeeded."""
    field = _field("archive", "last_success_started_ms")
    with redis_errors("reading the archive's progress"):
        started = redis_io.client(settings.redis).hget(KeySpace.of(settings).batch_status, field)
    return started is not None and int(started) >= since_ms


def drift(rows: Iterable[Sequence]) -> dict[str, float]:
    """Per region, max error / (eps * N) of the newest hour with a sketch compared.

    `rows` as `batch.accuracy.compare` returns them (AccuracyRow, or tuples in its field order).
    """
    newest: dict[str, tuple[int, float]] = {}
    for row in map(AccuracyRow._make, rows):
        if row.sketch_present and row.error_bound is not None and row.hour >= newest.get(row.region, (-1, 0.0))[0]:
            newest[row.region] = (row.hour, row.max_error / max(1, row.error_bound))
    return {region: ratio for region, (_, ratio) in newest.items()}


def sketch_health(rows: Iterable[Sequence], now_ms: int, keep_hours: int) -> dict[str, int]:
    """Per region, `<region>:undercounts` (tags whose estimate fell below the exact count in the newest compared
    hour: a count-min sketch never undercounts unless Redis lost or evicted part of it) and
    `<region>:sketch_missing` (1 when its newest hour had mentions but no sketch while Redis should still keep
    it, 0 when it had one). A backfilled hour past its keeping says nothing."""
    newest: dict[str, AccuracyRow] = {}
    compared: dict[str, AccuracyRow] = {}
    for row in map(AccuracyRow._make, rows):
        if row.hour >= newest.get(row.region, row).hour:
            newest[row.region] = row
        if row.sketch_present and row.hour >= compared.get(row.region, row).hour:
            compared[row.region] = row
    fields = {f"{region}:undercounts": int(row.undercounts or 0) for region, row in compared.items()}
    for region, row in newest.items():
        kept = now_ms < bucket_expire_at_s(row.hour, "h", keep_hours) * 1000
        if row.sketch_present or kept:
            fields[f"{region}:sketch_missing"] = 0 if row.sketch_present else 1
    return fields


def record_drift(settings: Settings, rows: Iterable[Sequence]) -> None:
    """Record `drift(rows)` and `sketch_health(rows)` for the SpeedExactDrift, SpeedUndercounts and
    SpeedSketchMissing alerts (regions without a compared hour keep their values)."""
    rows = list(rows)
    fields = {**drift(rows), **sketch_health(rows, int(time.time() * 1000), settings.speed.keep_hours)}
    if fields:
        with redis_errors("recording speed-vs-exact drift"):
            redis_io.client(settings.redis).hset(KeySpace.of(settings).accuracy, mapping=fields)
