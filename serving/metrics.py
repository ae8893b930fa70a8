"""Prometheus metrics of the API on a registry of its own (one per app, so tests can build many).

With several server workers the stack sets PROMETHEUS_MULTIPROC_DIR: every worker then writes its values
to files there and /metrics merges all workers, so counters never jump between workers' numbers.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

_TAG_ROUTES = {"count", "posts", "series"}
_ROUTES = {"/", "/trending", "/healthz", "/readyz", "/metrics", "/posts", "/events", "/regions", "/docs",
           "/openapi.json"}


class ApiMetrics:
    """Request counts and latencies by route, cache hits, produced records, snapshot age."""

    def __init__(self) -> None:
        self.registry = reg = CollectorRegistry()
        self.requests = Counter("trends_api_requests", "HTTP requests by route and status.", ["route", "status"],
                                registry=reg)
        self.latency = Histogram(
            "trends_api_request_seconds", "HTTP request latency by route.", ["route"], registry=reg,
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0),
        )
        self.cache = Counter("trends_api_trending_cache", "GET /trending answers by cache outcome.", ["outcome"],
                             registry=reg)
        self.produced = Counter("trends_api_produced_records", "Records produced to Kafka by topic.", ["topic"],
                                registry=reg)
        self.rejected = Counter("trends_api_rejected_records", "Records refused by the event contract.", registry=reg)
        self.snapshot_age = Gauge("trends_api_snapshot_age_seconds", "Age of the snapshot /readyz checked.",
                                  registry=reg, multiprocess_mode="livemax")

    def exposition(self) -> tuple[bytes, str]:
        """The text format: all workers merged in multiprocess mode, else this registry."""
        if os.environ.get(MULTIPROC_ENV):
            merged = CollectorRegistry()
            MultiProcessCollector(merged)
            return generate_latest(merged), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def fresh_multiproc_dir(path: Path) -> Path:
    """An empty directory for multiprocess metrics (old workers' files would count again)."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def route_label(path: str) -> str:
    """A bounded route label: known paths as is, tag routes by template, the rest `other`."""
    if path in _ROUTES:
        return path
    if path.startswith("/tags/"):
        last = path.rsplit("/", 1)[-1]
        return f"/tags/{{tag}}/{last}" if last in _TAG_ROUTES else "other"
    return "/static" if path.startswith("/static/") else "other"


class MetricsMiddleware:
    """Pure ASGI middleware: count and time every HTTP request, with the labelled children cached."""

    def __init__(self, app, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics
        self.children: dict[tuple[str, int], tuple] = {}

    def child(self, path: str, status: int) -> tuple:
        """The (counter, histogram) children of a path and status; at most 10,000 cached."""
        found = self.children.get((path, status))
        if found is None:
            route = route_label(path)
            found = (self.metrics.requests.labels(route, str(status)), self.metrics.latency.labels(route))
            if len(self.children) < 10_000:
                self.children[(path, status)] = found
        return found

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]

        async def send_status(message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            counter, latency = self.child(scope["path"], status[0])
            counter.inc()
            latency.observe(time.perf_counter() - started)
