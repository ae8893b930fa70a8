"""Airflow 3 DAGs of the batch layer. They only wire batch.tasks; buckets come from the data interval.

- `archive`: drain Kafka into the Delta archive every few minutes.
- `hourly_exact`: after the grace period, exact counts of the closed hour, published to Redis.
- `daily_exact`: after the grace period, the whole day again, top posts, baselines, accuracy, then OPTIMIZE/VACUUM.

Airflow 3 gives plain cron schedules a zero-length data interval (CronTriggerTimetable); the
CronDataIntervalTimetable makes the run at 11:00 cover [10:00, 11:00): the closed hour.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow.providers.standard.sensors.time_delta import TimeDeltaSensor
from airflow.sdk import CronDataIntervalTimetable, dag, get_current_context, task

from trendcore.settings import Settings

_settings = Settings()
_air, _batch = _settings.airflow, _settings.batch
START = datetime.fromisoformat(_air.start_date).replace(tzinfo=timezone.utc)
DEFAULTS = {
    "retries": _air.retries,
    "retry_delay": timedelta(seconds=_air.retry_delay_s),
    "retry_exponential_backoff": 2.0,
    "max_retry_delay": timedelta(minutes=30),
}


def _stamp() -> str:
    from batch.tasks import stamp

    ctx = get_current_context()
    return stamp(ctx["dag"].dag_id, ctx["run_id"], ctx["ti"].try_number)


@dag(dag_id="archive", schedule=timedelta(minutes=_air.archive_every_minutes), start_date=START, catchup=False,
     max_active_runs=1, default_args=DEFAULTS, tags=["trends", "batch"])
def archive_dag():
    @task(task_id="archive")
    def archive() -> dict:
        from batch import tasks

        return tasks.archive()

    archive()


def _grace() -> TimeDeltaSensor:
    """Wait the grace period after the data interval ends, so late data is archived first."""
    return TimeDeltaSensor(task_id="grace", delta=timedelta(minutes=_batch.grace_minutes), mode="reschedule",
                           poke_interval=60)


@dag(dag_id="hourly_exact", schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"), start_date=START,
     catchup=_air.catchup, max_active_runs=1,
     default_args=DEFAULTS, tags=["trends", "batch"])
def hourly_dag():
    grace = _grace()

    @task(task_id="hourly")
    def hourly() -> dict:
        from batch import tasks

        return tasks.hourly(get_current_context()["data_interval_start"], _stamp())

    grace >> hourly()


@dag(dag_id="daily_exact", schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"), start_date=START,
     catchup=_air.catchup, max_active_runs=1,
     default_args=DEFAULTS, tags=["trends", "batch"])
def daily_dag():
    grace = _grace()

    @task(task_id="daily")
    def daily() -> dict:
        from batch import tasks

        return tasks.daily(get_current_context()["data_interval_start"], _stamp())

    @task(task_id="maintain")
    def maintain() -> dict:
        from batch import tasks

        return tasks.maintain(get_current_context()["data_interval_start"])

    grace >> daily() >> maintain()


archive_dag()
hourly_dag()
daily_dag()
