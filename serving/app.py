"""The app factory: one Settings in, a FastAPI app out (routes, middleware, services on app.state)."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from serving.deps import build_services
from serving.fastpath import TrendingFastPath, TrendingHits
from serving.metrics import MetricsMiddleware
from serving.routes import dashboard, health, ingest, tags, trending
from serving.routes.dashboard import STATIC
from trendcore.settings import Settings

DESCRIPTION = """Hashtag trends: merged exact (batch) and approximate (speed) views, ingestion, metrics.
Every count says its `source`: `exact`, `approx` or `mixed`. Writes need `Authorization: Bearer <token>`."""


def create_app(settings: Settings) -> FastAPI:
    """Build the API for these settings; connections open lazily on first use and close at shutdown."""
    svc = build_services(settings)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        svc.close()

    app = FastAPI(title="Hashtag trends", version="1.0", description=DESCRIPTION, lifespan=lifespan)
    app.state.services = svc
    for module in (trending, tags, ingest, health, dashboard):
        app.include_router(module.router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_middleware(MetricsMiddleware, metrics=svc.metrics)
    app.state.trending_hits = TrendingHits(svc.trending, hits=svc.metrics.cache.labels("fast"),
                                           served=svc.metrics.requests.labels("/trending", "200"))
    app.add_middleware(TrendingFastPath, hits=app.state.trending_hits)
    return app


def app_from_env() -> FastAPI:
    """ASGI factory entry point (`granian --interface asgi --factory serving.app:app_from_env`): settings from
    TRENDS_*."""
    return create_app(Settings())
