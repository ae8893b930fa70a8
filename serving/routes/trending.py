"""GET /trending: the materialized snapshot, one Redis read per second per query, cached bytes otherwise."""

from __future__ import annotations

import time
from typing import Literal

from fastapi import APIRouter, Query, Request, Response

from serving.deps import ServicesDep
from serving.params import MAX_K, REGION_DOC, REGION_PATTERN, region_code
from serving.routes import http_errors
from serving.schemas import TrendingAnswer, errors

router = APIRouter(tags=["read"])


@router.get("/trending", response_model=TrendingAnswer, responses=errors(422, 503),
            summary="Top k tags by volume or rise")
async def trending(
    request: Request,
    svc: ServicesDep,
    window: Literal["1h", "24h"] = "1h",
    region: str = Query("all", pattern=REGION_PATTERN, description=REGION_DOC),
    k: int = Query(10, ge=1, le=MAX_K),
    rank: Literal["volume", "rise"] = "volume",
) -> Response:
    """Serve the speed layer's snapshot as cached bytes (at most cache_ttl_s old), with its age spliced in."""
    with http_errors():
        key = (region_code(region), window, rank, k)
        answer = await svc.trending.answer(key, request.scope["query_string"])
    body = answer.body(int(time.time() * 1000))
    return Response(body, media_type="application/json", headers={"cache-control": "max-age=1"})
