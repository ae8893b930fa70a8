"""What the Airflow tasks call: one Settings() per task, the bucket from the data interval, never now()."""

from __future__ import annotations

import dataclasses
from datetime import datetime

from batch.status import archived_since, recorded
from trendcore.settings import Settings
from trendcore.windows import day_of, hour_of


def _spark(settings: Settings, app: str):
    from batch import session

    return session.get(settings, app)


def stamp(dag_id: str, run_id: str, try_number: int) -> str:
    """The run id stamped on Redis views: Airflow's run id and try."""
    return f"{dag_id}/{run_id}/try{try_number}"


def hour_of_interval(start: datetime) -> int:
    """The hour bucket a data interval starts in."""
    return hour_of(int(start.timestamp() * 1000))


def day_of_interval(start: datetime) -> int:
    """The UTC day bucket a data interval starts in."""
    return day_of(int(start.timestamp() * 1000))


def archived(interval_end: datetime) -> bool:
    """Sensor body: has an archive run started `grace_minutes` after the interval ended succeeded (late data in)?"""
    settings = Settings()
    since_ms = int(interval_end.timestamp() * 1000) + settings.batch.grace_minutes * 60_000
    return archived_since(settings, since_ms)


def archive() -> dict:
    """Drain Kafka into the archive."""
    from batch import archive as job

    settings = Settings()
    with recorded(settings, "archive"):
        return dataclasses.asdict(job.run(_spark(settings, "airflow-archive"), settings))


def hourly(interval_start: datetime, run_id: str) -> dict:
    """The hourly job for the hour the data interval starts in."""
    from batch import jobs

    settings = Settings()
    hour = hour_of_interval(interval_start)
    with recorded(settings, "hourly"):
        return dataclasses.asdict(jobs.hourly(_spark(settings, "airflow-hourly"), settings, hour, run_id))


def daily(interval_start: datetime, run_id: str) -> dict:
    """The daily job for the UTC day the data interval starts in."""
    from batch import jobs

    settings = Settings()
    day = day_of_interval(interval_start)
    with recorded(settings, "daily"):
        return dataclasses.asdict(jobs.daily(_spark(settings, "airflow-daily"), settings, day, run_id))


def maintain(interval_start: datetime) -> dict:
    """OPTIMIZE the day's partitions, VACUUM within retention."""
    from batch import jobs

    settings = Settings()
    report = jobs.maintain(_spark(settings, "airflow-maintain"), settings, day_of_interval(interval_start))
    return {table: {k: v for k, v in m.items() if isinstance(v, (int, float))} for table, m in report.items()}
