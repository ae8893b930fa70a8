"""The Airflow DAGs: they import cleanly, and dag.test() runs each for a fixed logical date on real services.

Airflow gets its own AIRFLOW_HOME (SQLite, migrated once here) and the batch settings reach the
in-process tasks through TRENDS_* variables, restored when the module ends. dag.test() runs the tasks
in this process, so the retry drill's fault is a patched job function, not a setting.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest
from pyspark.sql import DataFrame

from adapters import kafka as kafka_io
from adapters import redis as redis_io
from batch import delta, jobs, tables, tasks
from batch.stack import airflow_env, dags_folder
from batch.tables import Lake
from tests.integration.test_batch import hour_truth, isolated
from trendcore import keys
from trendcore.errors import ServiceError
from trendcore.events import parse_timestamp
from trendcore.settings import Settings
from trendcore.windows import DAY_MS, HOUR_MS
from trends.gen.model import GenConfig, Stream
from trends.gen.run import produce

pytestmark = pytest.mark.integration

DAGS = {"archive", "hourly_exact", "daily_exact"}
START = "2026-10-12T10:05:00Z"
POSTS = 2000


def fail_once(publish_counts: Callable[..., int], injected: list[str]) -> Callable[..., int]:
    """Retry drill: the job's first publish raises once (its tables are written by then), later ones publish."""

    def publish_or_fail(settings: Settings, views: DataFrame, run_id: str, result: jobs.JobResult) -> int:
        if not injected:
            injected.append(f"{result.job} {result.bucket}")
            raise ServiceError(f"{result.job} {result.bucket}: injected failure before publishing")
        return publish_counts(settings, views, run_id, result)

    return publish_or_fail


@pytest.fixture(scope="module")
def airflow(stack, spark):
    """Own topics/lake/Redis db, AIRFLOW_HOME migrated, env set for in-process tasks, the first publish of
    the module failing once; yields (settings, stream, injected failures)."""
    own = isolated(stack, f"dags-{int(time.time())}", redis_db=4)
    own.airflow.retry_delay_s = 1
    own.airflow.start_date = "2026-01-01"  # before the logical dates below: runs get task instances
    own.batch.vacuum = False  # VACUUM lists every file of every table, not what these tests check; OPTIMIZE runs
    kafka_io.ensure_topics(own.kafka)
    redis_io.client(own.redis).flushdb()
    env = airflow_env(own)
    injected: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        mp.setattr(jobs, "_publish_counts", fail_once(jobs._publish_counts, injected))
        own.airflow.home.mkdir(parents=True, exist_ok=True)
        airflow_bin = str(Path(sys.executable).parent / "airflow")
        done = subprocess.run([airflow_bin, "db", "migrate"], capture_output=True, text=True, env=None)
        assert done.returncode == 0, done.stderr[-2000:]
        stream = Stream(GenConfig(seed=0xDA6, start_ms=parse_timestamp(START), event_rate=POSTS / 3000,
                                  vocabulary=3000, late_max_s=600, wall_now_ms=int(time.time() * 1000)))
        produce(stream, own, count=POSTS)
        yield own, stream, injected


def _bag(settings):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(dags_folder(settings)))


def test_every_dag_imports_without_errors(airflow):
    own, _, _ = airflow
    bag = _bag(own)
    assert bag.import_errors == {}
    assert set(bag.dag_ids) == DAGS
    for dag_id in DAGS:
        dag = bag.get_dag(dag_id)
        assert all(t.retries >= 1 for t in dag.tasks if t.task_id != "archived")


def _run(settings, dag_id: str, logical: str):
    from airflow.utils.state import DagRunState

    dag = _bag(settings).get_dag(dag_id)
    run = dag.test(logical_date=datetime.fromisoformat(logical.replace("Z", "+00:00")).astimezone(timezone.utc))
    assert run.state == DagRunState.SUCCESS, f"{dag_id} {logical}: {run.state}"
    return run


def test_archive_then_hourly_then_daily_dags_on_real_services(airflow, spark):
    own, stream, injected = airflow
    lake, truth = Lake.of(own), stream.truth
    closed = datetime(2026, 10, 12, 11, tzinfo=timezone.utc)
    assert not tasks.archived(closed)  # no archive run yet: the exact DAGs' sensor keeps waiting
    _run(own, "archive", "2026-10-12T11:00:00Z")
    assert tasks.archived(closed)  # that run started after 11:00 + grace
    assert delta.read(spark, lake, tables.POSTS).count() == truth.posts

    run = _run(own, "hourly_exact", "2026-10-12T11:00:00Z")
    hour = int(run.data_interval_start.timestamp() * 1000) // HOUR_MS
    assert hour * HOUR_MS == parse_timestamp("2026-10-12T10:00:00Z")  # the closed hour before 11:00
    tries = {ti.task_id: ti.try_number for ti in run.get_task_instances()}
    assert tries["hourly"] == 2  # the injected failure, then the retry
    assert injected == [f"hourly {hour}"]
    client = redis_io.client(own.redis)
    published = {k.decode(): int(v) for k, v in client.hgetall(keys.exact_hour("all", hour)).items()}
    assert published == dict(hour_truth(truth, hour, "all"))
    assert client.hget(keys.exact_meta("all", "h", hour), "run_id").decode().endswith("/try2")

    run = _run(own, "daily_exact", "2026-10-13T00:00:00Z")
    day = int(run.data_interval_start.timestamp() * 1000) // DAY_MS
    rows = delta.read(spark, lake, tables.DAILY).where(f"day = {day} AND region = 'all'").collect()
    daily = {r["tag"]: r["mentions"] for r in rows}
    assert daily == dict(truth.counts("all"))
    assert {ti.task_id: ti.state for ti in run.get_task_instances()}["maintain"] == "success"
