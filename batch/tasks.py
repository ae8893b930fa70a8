"""What the Airflow tasks call: one Settings() per task, the bucket from the data interval, never now().

Each job runs through spark-submit (`batch.session.submit`), not in the task's process: the driver runs
where spark-submit puts it, with the cluster's master, the shipped code and every `spark.conf`, and the
Airflow worker holds no JVM. The task gets the job's result (its JSON line) as its return value (XCom).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

from batch import session, tables
from batch.status import archived_since, recorded
from batch.tables import Lake
from trendcore.settings import Settings
from trendcore.windows import day_date, day_of, hour_of, hour_start

ARCHIVE_OUTPUTS = (tables.MENTIONS, tables.BRONZE_ENGAGEMENTS)
"""The archive's tables the exact jobs read (mentions: every count; engagements: the daily top posts)."""


def stamp(dag_id: str, run_id: str, try_number: int) -> str:
    """The run id stamped on Redis views: Airflow's run id and try."""
    return f"{dag_id}/{run_id}/try{try_number}"


def hour_of_interval(start: datetime) -> int:
    """The hour bucket a data interval starts in."""
    return hour_of(int(start.timestamp() * 1000))


def day_of_interval(start: datetime) -> int:
    """The UTC day bucket a data interval starts in."""
    return day_of(int(start.timestamp() * 1000))


def table_uri(settings: Settings, table: str) -> str:
    """A table's location as a URI (an Airflow Asset's): the lake's own scheme, or file:// for a local path."""
    path = Lake.of(settings).path(table)
    return path if urlsplit(path).scheme else Path(path).absolute().as_uri()


def archived(interval_end: datetime) -> bool:
    """Sensor body: has an archive run started `grace_minutes` after the interval ended succeeded (late data in)?"""
    settings = Settings()
    since_ms = int(interval_end.timestamp() * 1000) + settings.batch.grace_minutes * 60_000
    return archived_since(settings, since_ms)


def archive() -> dict:
    """Drain Kafka into the archive."""
    settings = Settings()
    with recorded(settings, "archive"):
        return session.submit(settings, "archive")  # type: ignore[return-value]


def hourly(interval_start: datetime, run_id: str) -> dict:
    """The hourly job for the hour the data interval starts in."""
    settings = Settings()
    hour = hour_start(hour_of_interval(interval_start)).strftime("%Y-%m-%dT%H")
    with recorded(settings, "hourly"):
        return session.submit(settings, "hourly", "--hour", hour, "--run-id", run_id)  # type: ignore[return-value]


def daily(interval_start: datetime, run_id: str) -> dict:
    """The daily job for the UTC day the data interval starts in."""
    settings = Settings()
    day = day_date(day_of_interval(interval_start)).isoformat()
    with recorded(settings, "daily"):
        return session.submit(settings, "daily", "--date", day, "--run-id", run_id)  # type: ignore[return-value]


def maintain(interval_start: datetime) -> dict:
    """OPTIMIZE the day's partitions, VACUUM within retention; the numeric metrics of each table."""
    settings = Settings()
    report = session.submit(settings, "maintain", "--date", day_date(day_of_interval(interval_start)).isoformat())
    return {table: {k: v for k, v in m.items() if isinstance(v, (int, float))}
            for table, m in report.items()}  # type: ignore[union-attr]
