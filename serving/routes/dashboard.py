"""GET /: the dashboard (plain HTML + JS, no build step), its static files, and GET /regions for its picker."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

from trendcore.regions import ISO_3166_ALPHA2, WORLDWIDE

router = APIRouter()
STATIC = Path(__file__).resolve().parent.parent / "static"


@router.get("/", include_in_schema=False)
async def dashboard() -> FileResponse:
    """The single-page dashboard; its script calls the read endpoints."""
    return FileResponse(STATIC / "index.html", headers={"cache-control": "no-cache"})


@router.get("/regions", tags=["read"], summary="Regions a reader may ask about")
async def regions() -> list[str]:
    """'all' then every ISO 3166-1 alpha-2 code, sorted."""
    return [WORLDWIDE, *sorted(ISO_3166_ALPHA2)]
