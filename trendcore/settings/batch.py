"""Settings of the batch layer and Airflow (TRENDS_BATCH__*, TRENDS_AIRFLOW__*)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from trendcore.settings.paths import under_home


class BatchSettings(BaseModel):
    grace_minutes: int = Field(10, ge=0, description="Wait after an hour closes before its exact job runs.")
    max_offsets_per_trigger: int = Field(
        2_000_000, ge=1, description="Kafka records per archive micro-batch (availableNow splits the backlog)."
    )
    top_posts: int = Field(10, ge=1, description="Posts kept per (tag, region, day) in top_posts_daily.")
    baseline_weeks: int = Field(4, ge=1, description="Weeks of the same hour of week averaged for a baseline.")
    baseline_min_mentions: int = Field(
        3, ge=1, description="Tags with fewer mentions over the baseline window get no baseline (bounds Redis)."
    )
    baseline_min_expected: float = Field(
        1.0, ge=0,
        description="Expected hourly counts under this get no baseline "
        "(read as 0: with speed.rise_b = 10 a rise score moves under 10%).",
    )
    accuracy_tags: int = Field(1000, ge=10, description="Exact top tags per region checked against the sketch.")
    publish_ttl_s: int = Field(8 * 86_400, description="TTL of exact views in Redis.")
    baseline_ttl_s: int = Field(15 * 86_400, description="TTL of baselines in Redis.")
    vacuum: bool = Field(True, description="VACUUM after OPTIMIZE in the daily maintenance (slow: lists every file).")
    vacuum_retain_hours: int = Field(168, ge=168, description="VACUUM keeps files younger than this (Delta minimum).")


class AirflowSettings(BaseModel):
    home: Path = under_home("airflow", "AIRFLOW_HOME of the local Airflow.")
    port: int = Field(18080, description="Port of the local Airflow UI/API server (bound to 127.0.0.1).")
    dags: Path | None = Field(
        None, description="DAGs folder Airflow loads; unset: the `dags` package installed with the project "
        "(found beside the installed `batch` package).")
    archive_every_minutes: int = Field(5, ge=1, description="Schedule of the archive DAG.")
    sensor_poke_s: int = Field(
        30, ge=5, description="How often the exact DAGs' `archived` sensor checks for the archive run it waits "
        "for. Reschedule mode: each check is a short task run; on a loaded host a check due again before the "
        "executor reported the previous one races it (Airflow logs an error and retries the sensor), as a "
        "soak with 5 s met.")
    retries: int = Field(3, ge=0, description="Retries of every batch task (exponential backoff).")
    retry_delay_s: int = Field(30, ge=0, description="First retry delay; doubles each retry.")
    start_date: str = Field("2026-11-01", description="First data interval of the scheduled DAGs (UTC date).")
    catchup: bool = Field(
        False, description="Schedule every missed interval since start_date when the scheduler starts.")
    parallelism: int = Field(
        1, ge=1, description="Task instances the local Airflow runs at once: each batch task is a Spark JVM with "
        "local[*], so on 2 cores concurrent ones only slow each other down and race on new Delta tables."
    )
