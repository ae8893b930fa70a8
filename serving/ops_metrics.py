"""Operational metrics that live in Redis (batch job status, speed-vs-exact drift), exported on /metrics.

The batch layer runs as short Spark jobs that Prometheus cannot scrape, so it records its outcome
in Redis and the API turns that into metrics on each scrape.
"""

from __future__ import annotations

import redis
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from adapters.redis import redis_errors
from trendcore.errors import ServiceError
from trendcore.keys import KeySpace


class _OpsCollector:
    """A one-scrape collector over the two Redis hashes."""

    def __init__(self, status: dict[bytes, bytes], accuracy: dict[bytes, bytes]) -> None:
        self.status, self.accuracy = status, accuracy

    def collect(self):
        success = GaugeMetricFamily("trends_batch_last_success_timestamp_seconds",
                                    "Last successful run of a batch job.", labels=["job"])
        failures = CounterMetricFamily("trends_batch_failures", "Failed runs of a batch job.", labels=["job"])
        for field, value in sorted(self.status.items()):
            job, _, what = field.decode().rpartition(":")
            if what == "last_success_ms":
                success.add_metric([job], int(value) / 1000)
            elif what == "failures":
                failures.add_metric([job], int(value))
        drift = GaugeMetricFamily("trends_speed_error_ratio",
                                  "Max sketch error / (eps * N) of the newest compared hour.", labels=["region"])
        under = GaugeMetricFamily("trends_speed_undercounts", "Tags estimated below their exact count in the "
                                  "newest compared hour (never, unless sketches were lost).", labels=["region"])
        missing = GaugeMetricFamily("trends_speed_sketch_missing", "1 when the newest exact hour had mentions but "
                                    "Redis held no sketch while it should.", labels=["region"])
        families = {"undercounts": under, "sketch_missing": missing}
        for field, value in sorted(self.accuracy.items()):
            region, _, what = field.decode().partition(":")
            if not what:
                drift.add_metric([region], float(value))
            elif what in families:
                families[what].add_metric([region], float(value))
        yield from (success, failures, drift, under, missing)


def ops_exposition(client: redis.Redis, keys: KeySpace) -> bytes:
    """The Prometheus text of the batch status and drift metrics (empty when Redis is unreachable)."""
    try:
        with redis_errors("reading batch status and drift"):
            status, accuracy = client.hgetall(keys.batch_status), client.hgetall(keys.accuracy)
    except ServiceError:
        return b""  # /metrics still answers with the API's own metrics
    registry = CollectorRegistry()
    registry.register(_OpsCollector(status, accuracy))
    return generate_latest(registry)
