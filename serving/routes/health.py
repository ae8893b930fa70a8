"""GET /healthz (the process answers), /readyz (dependencies and data fresh), /metrics (Prometheus)."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.concurrency import run_in_threadpool

from serving.deps import ServicesDep
from serving.ops_metrics import ops_exposition
from serving.readiness import readiness, snapshot_age_s
from serving.routes import json_response
from serving.schemas import Health

router = APIRouter(tags=["ops"])


@router.get("/healthz", response_model=Health, summary="Liveness")
async def healthz() -> dict:
    """The process serves requests (no dependency is checked)."""
    return {"status": "ok", "checks": {}}


@router.get("/readyz", response_model=Health, responses={503: {"model": Health}}, summary="Readiness")
async def readyz(svc: ServicesDep) -> Response:
    """200 when Redis and Kafka are reachable and the probe snapshot is fresh; 503 naming what is not."""
    checks = await run_in_threadpool(readiness, svc.redis, svc.settings)
    ok = all(v == "ok" for v in checks.values())
    return json_response({"status": "ok" if ok else "unavailable", "checks": checks}, status_code=200 if ok else 503)


_TEXT = {200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Prometheus text format"}}


@router.get("/metrics", summary="Prometheus metrics", response_class=Response, responses=_TEXT)
async def metrics(svc: ServicesDep) -> Response:
    """Counters and histograms in the Prometheus text format (all workers merged when run by the stack)."""
    age = await run_in_threadpool(snapshot_age_s, svc.redis, svc.settings)
    if age is not None:
        svc.metrics.snapshot_age.set(age)
    body, content_type = svc.metrics.exposition()
    ops = await run_in_threadpool(ops_exposition, svc.redis, svc.keys)
    return Response(body + ops, media_type=content_type)
