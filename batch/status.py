"""Each batch job's outcome and the newest speed-vs-exact drift, recorded in Redis for /metrics.

Short Spark jobs cannot be scraped, so the API exports these hashes (serving/ops_metrics.py) for
the BatchJobFailing and SpeedExactDrift alerts (ops/alerts.yml).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from trendcore import keys
from trendcore.settings import Settings
from trends.adapters import redis as redis_io
from trends.adapters.redis import redis_errors


@contextmanager
def recorded(settings: Settings, job: str) -> Iterator[None]:
    """Run a job; count a failure (and re-raise) or stamp its success time (wall clock, for alerts only)."""
    client = redis_io.client(settings.redis)
    try:
        yield
    except Exception:
        with redis_errors(f"recording a failure of {job}"):
            client.hincrby(keys.BATCH_STATUS, f"{job}:failures", 1)
        raise
    with redis_errors(f"recording a success of {job}"):
        client.hset(keys.BATCH_STATUS, f"{job}:last_success_ms", int(time.time() * 1000))


def record_drift(settings: Settings, rows: Sequence[tuple]) -> None:
    """Per region, max error / (eps * N) of the newest hour compared (rows as batch.accuracy.compare)."""
    newest: dict[str, tuple[int, float]] = {}
    for row in rows:
        hour, region, bound, max_error, present = row[0], row[1], row[5], row[7], row[13]
        if present and bound is not None and hour >= newest.get(region, (-1, 0.0))[0]:
            newest[region] = (hour, max_error / max(1, bound))
    if newest:
        with redis_errors("recording speed-vs-exact drift"):
            redis_io.client(settings.redis).hset(keys.ACCURACY, mapping={r: ratio for r, (_, ratio) in newest.items()})
