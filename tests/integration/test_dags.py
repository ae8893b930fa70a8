"""The Airflow DAGs: they import cleanly, declare the archive's tables as Assets (lineage), and dag.test() runs
each for a fixed logical date on real services.

Airflow gets its own AIRFLOW_HOME (SQLite, migrated once here) and the batch settings reach the tasks
through TRENDS_* variables, restored when the module ends. dag.test() runs the tasks in this process, and
each task runs its job through spark-submit (a driver process of its own), so the retry drill's fault is
a `sitecustomize.py` this module writes onto PYTHONPATH: in spark-submit's driver only, it patches the
job's publish step to fail once (a marker file remembers it across processes). No setting knows of it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from adapters import kafka as kafka_io
from adapters import redis as redis_io
from batch import delta, tables, tasks
from batch.stack import airflow_env, dags_folder
from batch.tables import Lake
from tests.integration.test_batch import hour_truth, isolated
from trendcore import keys
from trendcore.events import parse_timestamp
from trendcore.windows import DAY_MS, HOUR_MS
from trends.gen.model import GenConfig, Stream
from trends.gen.run import produce

pytestmark = pytest.mark.integration

DAGS = {"archive", "hourly_exact", "daily_exact"}
START = "2026-10-12T10:05:00Z"
POSTS = 2000


FAIL_ONCE = '''"""Written by tests/integration/test_dags.py: the retry drill, in spark-submit's driver only.

The job's first publish raises once (its tables are written by then); the marker file remembers it across
the tasks' processes, so later publishes (the retry, the other DAGs) go through.
"""
import sys
from pathlib import Path

MARK = Path({mark!r})

if sys.argv and sys.argv[0].endswith("submit.py"):
    from batch import jobs
    from trendcore.errors import ServiceError

    _publish_counts = jobs._publish_counts

    def _publish_or_fail(settings, views, run_id, result):
        if not MARK.exists():
            MARK.write_text(f"{{result.job}} {{result.bucket}}")
            raise ServiceError(f"{{result.job}} {{result.bucket}}: injected failure before publishing")
        return _publish_counts(settings, views, run_id, result)

    jobs._publish_counts = _publish_or_fail
'''


def fail_once(folder: Path) -> tuple[dict[str, str], Path]:
    """The retry drill: a sitecustomize.py in `folder` that makes the first publish in a spark-submit driver
    fail once. Returns the environment that puts it on PYTHONPATH, and the marker file naming the failed job."""
    mark = folder / "injected"
    (folder / "sitecustomize.py").write_text(FAIL_ONCE.format(mark=str(mark)))
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": path}, mark


def injected(mark: Path) -> list[str]:
    """The jobs the drill failed (at most one)."""
    return mark.read_text().splitlines() if mark.exists() else []


@pytest.fixture(scope="module")
def airflow(stack, spark, tmp_path_factory):
    """Own topics/lake/Redis db, AIRFLOW_HOME migrated, env set for the tasks, the first publish of the
    module failing once; yields (settings, stream, the drill's marker file)."""
    own = isolated(stack, f"dags-{int(time.time())}", redis_db=4)
    own.airflow.retry_delay_s = 1
    own.airflow.start_date = "2026-01-01"  # before the logical dates below: runs get task instances
    own.airflow.sensor_poke_s = 7  # not the default: the DAGs read it from the settings
    own.batch.vacuum = False  # VACUUM lists every file of every table, not what these tests check; OPTIMIZE runs
    kafka_io.ensure_topics(own.kafka)
    redis_io.client(own.redis).flushdb()
    drill_env, mark = fail_once(tmp_path_factory.mktemp("retry-drill"))
    env = {**airflow_env(own), **drill_env}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        own.airflow.home.mkdir(parents=True, exist_ok=True)
        airflow_bin = str(Path(sys.executable).parent / "airflow")
        done = subprocess.run([airflow_bin, "db", "migrate"], capture_output=True, text=True, env=None)
        assert done.returncode == 0, done.stderr[-2000:]
        stream = Stream(GenConfig(seed=0xDA6, start_ms=parse_timestamp(START), event_rate=POSTS / 3000,
                                  vocabulary=3000, late_max_s=600, wall_now_ms=int(time.time() * 1000)))
        produce(stream, own, count=POSTS)
        yield own, stream, mark


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
    mentions = tasks.table_uri(own, tables.MENTIONS)
    uris = {(dag_id, task.task_id, way): {asset.uri for asset in getattr(task, way)}
            for dag_id in DAGS for task in bag.get_dag(dag_id).tasks for way in ("inlets", "outlets")}
    assert mentions in uris["archive", "archive", "outlets"]  # the archive produces the Asset ...
    assert mentions in uris["hourly_exact", "hourly", "inlets"]  # ... the exact jobs consume it: lineage
    assert mentions in uris["daily_exact", "daily", "inlets"]
    for dag_id in ("hourly_exact", "daily_exact"):  # still on the clock, behind the `archived` sensor
        assert type(bag.get_dag(dag_id).timetable).__name__ == "CronDataIntervalTimetable"
        assert bag.get_dag(dag_id).get_task("archived").poke_interval == own.airflow.sensor_poke_s


def _run(settings, dag_id: str, logical: str):
    from airflow.utils.state import DagRunState

    dag = _bag(settings).get_dag(dag_id)
    run = dag.test(logical_date=datetime.fromisoformat(logical.replace("Z", "+00:00")).astimezone(timezone.utc))
    assert run.state == DagRunState.SUCCESS, f"{dag_id} {logical}: {run.state}"
    return run


def test_archive_then_hourly_then_daily_dags_on_real_services(airflow, spark):
    own, stream, mark = airflow
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
    assert injected(mark) == [f"hourly {hour}"]
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
