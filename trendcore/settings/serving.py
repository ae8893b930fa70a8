"""Settings of the HTTP API (TRENDS_API__*)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ApiSettings(BaseModel):
    host: str = Field("127.0.0.1", description="Address the API binds.")
    port: int = Field(8700, description="Port of the API and dashboard.")
