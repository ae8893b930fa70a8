"""Settings of the batch layer and Airflow (TRENDS_BATCH__*, TRENDS_AIRFLOW__*)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from trendcore.settings.paths import PROJECT_ROOT


class BatchSettings(BaseModel):
    grace_minutes: int = Field(10, ge=0, description="Wait after an hour closes before its exact job runs.")


class AirflowSettings(BaseModel):
    home: Path = Field(PROJECT_ROOT / "var" / "airflow", description="AIRFLOW_HOME of the local Airflow.")
    port: int = Field(18080, description="Port of the local Airflow UI/API server (bound to 127.0.0.1).")
