"""Each batch job's outcome and the newest speed-vs-exact drift, recorded in Redis for /metrics.

Short Spark jobs cannot be scraped, so the API exports these hashes (serving/ops_metrics.py) for
the BatchJobFailing and SpeedExactDrift alerts (ops/alerts.yml).
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


def _field(job: str, what: str) -> str:
    """A field of the status hash: `{job}:failures`, `{job}:last_success_ms`, `{job}:last_success_started_ms`."""
    return f"{job}:{what}"


@contextmanager
def recorded(settings: Settings, job: str) -> Iterator[None]:
    """Run a job; count a failure (and re-raise) or stamp when its successful run started and ended.

    Wall-clock stamps, for alerts and for `archived_since`: an archive run drains what Kafka held when it
    started, so its start time is how far the archive is known to be complete.
    """
    client, status = redis_io.client(settings.redis), KeySpace.of(settings.redis).batch_status
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
        started = redis_io.client(settings.redis).hget(KeySpace.of(settings.redis).batch_status, field)
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


def record_drift(settings: Settings, rows: Iterable[Sequence]) -> None:
    """Record `drift(rows)` for the SpeedExactDrift alert (regions without a compared hour keep their value)."""
    ratios = drift(rows)
    if ratios:
        with redis_errors("recording speed-vs-exact drift"):
            redis_io.client(settings.redis).hset(KeySpace.of(settings.redis).accuracy, mapping=ratios)
