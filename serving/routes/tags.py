"""GET /tags/{tag}/count|posts|series: one tag's merged count, top posts and sparkline series; parameters are
checked on the event loop, the Redis work runs on a read thread within the read budget (serving/pools.py)."""

from __future__ import annotations

import time
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query

from serving import queries
from serving.deps import ServicesDep
from serving.errors import BadRequest
from serving.params import MAX_K, REGION_DOC, REGION_PATTERN, TAG_DOC, hour_range, past_day, region_code, tag_key
from serving.routes import http_errors
from serving.schemas import CountAnswer, PostsAnswer, SeriesAnswer, errors

router = APIRouter(prefix="/tags", tags=["read"])


def _now_ms() -> int:
    return int(time.time() * 1000)


@router.get("/{tag}/count", response_model=CountAnswer, responses=errors(422, 503),
            summary="How many posts used a tag")
async def tag_count(
    svc: ServicesDep,
    tag: Annotated[str, Path(description=TAG_DOC)],
    window: Literal["1h", "24h"] | None = Query(None, description="Sliding window (default 1h unless from/to)"),
    region: str = Query("all", pattern=REGION_PATTERN, description=REGION_DOC),
    start: str | None = Query(None, alias="from",
                              description="Hour or day (UTC), e.g. 2026-11-29T19:00Z or 2026-11-29"),
    end: str | None = Query(None, alias="to", description="Exclusive end hour or day (UTC)"),
) -> dict:
    """Window or [from, to) count: exact views for published closed buckets, sketches elsewhere."""
    with http_errors():
        key, code, now = tag_key(tag), region_code(region), _now_ms()
        if start is None and end is None:
            return await svc.pools.read(queries.window_count, svc.redis, svc.keys, svc.settings, key, code,
                                        window or "1h", now)
        if start is None or end is None or window is not None:
            raise BadRequest("from/to: give both from and to, and no window (or only a window)")
        return await svc.pools.read(queries.range_count, svc.redis, svc.keys, svc.settings, key, code,
                                    hour_range(start, end, now), now)


@router.get("/{tag}/posts", response_model=PostsAnswer, responses=errors(422, 503),
            summary="Top or newest posts of a tag")
async def tag_posts(
    svc: ServicesDep,
    tag: Annotated[str, Path(description=TAG_DOC)],
    k: int = Query(2, ge=1, le=MAX_K),
    sort: Literal["top", "recent"] = "top",
    day: str | None = Query(None, description="A closed UTC day, e.g. 2026-11-28 (default: the last 24 hours)"),
) -> dict:
    """Top posts by weighted engagement (or newest): the batch layer's exact day when published."""
    with http_errors():
        now = _now_ms()
        day_index = None if day is None else past_day(day, now)
        return await svc.pools.read(queries.posts, svc.redis, svc.keys, tag_key(tag), k, sort, day_index, now)


@router.get("/{tag}/series", response_model=SeriesAnswer, responses=errors(422, 503),
            summary="A tag's counts per step, for sparklines")
async def tag_series(
    svc: ServicesDep,
    tag: Annotated[str, Path(description=TAG_DOC)],
    window: Literal["1h", "24h"] = "24h",
    step: str | None = Query(None, description="1m..30m for 1h, 1h..24h for 24h (default one bucket)"),
    region: str = Query("all", pattern=REGION_PATTERN, description=REGION_DOC),
) -> dict:
    """Counts per step over the window, exact where the batch layer published the hour."""
    with http_errors():
        key, code = tag_key(tag), region_code(region)
        queries.step_of(window, step)  # a wrong step is the caller's 422, checked before any Redis work
        return await svc.pools.read(queries.series, svc.redis, svc.keys, svc.settings, key, code, window, step,
                                    _now_ms())
