"""Settings of the speed layer (TRENDS_SPEED__*)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class SpeedSettings(BaseModel):
    group: str = Field("trends-speed", description="Kafka consumer group of the speed workers.")
    workers: int = Field(2, ge=1, description="Workers `trends up` starts locally.")
    metrics_port: int = Field(9108, description="Prometheus port of the first local worker (next ones +1).")
    materialize_every_s: float = Field(5.0, gt=0, description="Seconds between trending snapshots.")
