"""GET /healthz (the process answers), /readyz (dependencies and data fresh), /metrics (Prometheus)."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.concurrency import run_in_threadpool

from serving.deps import Services, ServicesDep
from serving.ops_metrics import ops_exposition
from serving.readiness import check_kafka, redis_readiness, snapshot_age_s
from serving.routes import json_response
from serving.schemas import Health
from trendcore.errors import TrendsError

router = APIRouter(tags=["ops"])


@router.get("/healthz", response_model=Health, summary="Liveness")
async def healthz() -> dict:
    """The process serves requests (no dependency is checked)."""
    return {"status": "ok", "checks": {}}


@router.get("/readyz", response_model=Health, responses={503: {"model": Health}}, summary="Readiness")
async def readyz(svc: ServicesDep) -> Response:
    """200 when Redis and Kafka are reachable and the probe snapshot is fresh; 503 naming what is not. The Redis
    checks run within the read budget (a stalled Redis is a failed check, not a hung probe); Kafka's has its own
    timeout."""
    try:
        checks = await svc.pools.read(redis_readiness, svc.redis, svc.settings)
    except TrendsError as exc:
        checks = {"redis": str(exc)}
    checks["kafka"] = await run_in_threadpool(check_kafka, svc.settings) or "ok"
    ok = all(v == "ok" for v in checks.values())
    return json_response({"status": "ok" if ok else "unavailable", "checks": checks}, status_code=200 if ok else 503)


_TEXT = {200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Prometheus text format"}}


@router.get("/metrics", summary="Prometheus metrics", response_class=Response, responses=_TEXT)
async def metrics(svc: ServicesDep) -> Response:
    """Counters and histograms in the Prometheus text format (all workers merged when run by the stack). The Redis
    parts (snapshot age, batch status) run within one read budget and are left out when Redis does not answer."""
    try:
        age, ops = await svc.pools.read(_redis_parts, svc)
    except TrendsError:
        age, ops = None, b""
    if age is not None:
        svc.metrics.snapshot_age.set(age)
    body, content_type = svc.metrics.exposition()
    return Response(body + ops, media_type=content_type)


def _redis_parts(svc: Services) -> tuple[float | None, bytes]:
    """The snapshot age and the batch status metrics, under one budget: two budgets in turn would let a stalled
    Redis hold a scrape for both (the age's read swallows its own error)."""
    return snapshot_age_s(svc.redis, svc.settings), ops_exposition(svc.redis, svc.keys)
