"""Airflow 3 DAGs of the batch layer. They only wire batch.tasks; buckets come from the data interval.

- `archive`: drain Kafka into the Delta archive every few minutes.
- `hourly_exact`: once the archive holds the closed hour (grace included), exact counts, published to Redis.
- `daily_exact`: once the archive holds the day (grace included), the whole day again, top posts, baselines,
  accuracy, then OPTIMIZE/VACUUM.

Every job runs through spark-submit (batch.tasks -> batch.session.submit): the task process starts no Spark.
The archive's tables the exact jobs read are Assets: the archive task's outlets, the exact tasks' inlets,
so Airflow shows the lineage; the exact DAGs keep their time schedules and wait on the `archived` sensor.

Airflow 3 gives plain cron schedules a zero-length data interval (CronTriggerTimetable); the
CronDataIntervalTimetable makes the run at 11:00 cover [10:00, 11:00): the closed hour.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow.sdk import Asset, CronDataIntervalTimetable, dag, get_current_context, task

from batch.tables import MENTIONS
from batch.tasks import ARCHIVE_OUTPUTS, table_uri
from trendcore.settings import Settings

_settings = Settings()
_air = _settings.airflow
START = datetime.fromisoformat(_air.start_date).replace(tzinfo=timezone.utc)
DEFAULTS = {
    "retries": _air.retries,
    "retry_delay": timedelta(seconds=_air.retry_delay_s),
    "retry_exponential_backoff": 2.0,
    "max_retry_delay": timedelta(minutes=30),
}
EXACT_PRIORITY = 10
"""Exact jobs go before a queued archive run when tasks wait for a slot (one at a time locally)."""
ARCHIVE_WAIT = timedelta(hours=6)
"""How long an exact job waits for the archive before it fails (and BatchJobFailing alerts)."""
ARCHIVED = {table: Asset(name=f"trends_{table}", uri=table_uri(_settings, table), group="trends")
            for table in ARCHIVE_OUTPUTS}
"""The archive's tables the exact jobs read, as Assets (lineage: archive -> hourly, daily)."""


def _stamp() -> str:
    from batch.tasks import stamp

    ctx = get_current_context()
    return stamp(ctx["dag"].dag_id, ctx["run_id"], ctx["ti"].try_number)


@dag(dag_id="archive", schedule=timedelta(minutes=_air.archive_every_minutes), start_date=START, catchup=False,
     max_active_runs=1, default_args=DEFAULTS, tags=["trends", "batch"])
def archive_dag():
    @task(task_id="archive", outlets=list(ARCHIVED.values()))
    def archive() -> dict:
        from batch import tasks

        return tasks.archive()

    archive()


def _archived():
    """Wait until an archive run that started `grace_minutes` after the interval ended has succeeded.

    Waiting on the archive itself, not on the clock alone, means an exact job never publishes an hour
    the archive has not drained yet (a slow or failing archive holds the exact jobs back).
    """

    @task.sensor(task_id="archived", poke_interval=_air.sensor_poke_s, timeout=ARCHIVE_WAIT.total_seconds(),
                 mode="reschedule")
    def archived() -> bool:
        from batch import tasks

        return tasks.archived(get_current_context()["data_interval_end"])

    return archived()


@dag(dag_id="hourly_exact", schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"), start_date=START,
     catchup=_air.catchup, max_active_runs=1,
     default_args=DEFAULTS, tags=["trends", "batch"])
def hourly_dag():
    archived = _archived()

    @task(task_id="hourly", priority_weight=EXACT_PRIORITY, inlets=[ARCHIVED[MENTIONS]])
    def hourly() -> dict:
        from batch import tasks

        return tasks.hourly(get_current_context()["data_interval_start"], _stamp())

    archived >> hourly()


@dag(dag_id="daily_exact", schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"), start_date=START,
     catchup=_air.catchup, max_active_runs=1,
     default_args=DEFAULTS, tags=["trends", "batch"])
def daily_dag():
    archived = _archived()

    @task(task_id="daily", priority_weight=EXACT_PRIORITY, inlets=list(ARCHIVED.values()))
    def daily() -> dict:
        from batch import tasks

        return tasks.daily(get_current_context()["data_interval_start"], _stamp())

    @task(task_id="maintain")
    def maintain() -> dict:
        from batch import tasks

        return tasks.maintain(get_current_context()["data_interval_start"])

    archived >> daily() >> maintain()


archive_dag()
hourly_dag()
daily_dag()
