"""spark-submit on a real Spark standalone cluster: a master and two workers from the pyspark install, on 127.0.0.1.

The jobs run as Airflow runs them (`batch.session.submit`: spark-submit in client mode, the project's code
shipped as a zip with --py-files). The executors run a Python that has the project's dependencies but not
the project itself (the venv's interpreter without its site hooks, so not the editable install): every UDF
imports trendcore and batch from the shipped zip. The archive on the cluster holds exactly the generated
stream, and the daily job on the cluster gives the same tables and Redis views as on local[2] from the same
archive. The daily job writes every table and view the hourly one does (the day's hours again, their exact hour
views, accuracy) with DataFrame operations only (the UDFs are the archive's), so the hourly job on the cluster
would add a spark-submit (about a minute here) and no path the daily one does not take.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from adapters import kafka as kafka_io
from adapters import redis as redis_io
from batch import delta, jobs, session, tables
from batch.tables import Lake
from tests.integration.test_batch import isolated
from trendcore import keys
from trendcore.events import parse_timestamp
from trendcore.windows import parse_day, parse_hour
from trends.gen.model import GenConfig, Stream
from trends.gen.run import produce
from trends.stack.procs import port_open

pytestmark = pytest.mark.integration

HOUR, DATE = "2026-10-19T08", "2026-10-19"
COMPARED = [tables.HOURLY, tables.DAILY, tables.TOP_POSTS, tables.BASELINES, tables.ACCURACY]
"""What the daily job writes."""
WORKERS = 2


def _spark_class(*args: str, log: Path) -> subprocess.Popen:
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1"}
    env.pop("PYTHONPATH", None)  # the executors see only what Spark gives them (the shipped zip)
    with open(log, "ab") as out:
        return subprocess.Popen([str(spark_class), *args], stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def _wait_for(line: str, proc: subprocess.Popen, log: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while line not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"no {line!r} in {log}: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.5)


def _wait_port(port: int, proc: subprocess.Popen, log: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not port_open("127.0.0.1", port):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"port {port} not open: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.5)


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in reversed(procs):
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


@pytest.fixture(scope="module")
def cluster(settings, tmp_path_factory):
    """A standalone master and two workers (1 core, 1 GB each; own work dirs), stopped by PID at the end.
    Yields (master URL, the workers' work dirs)."""
    base = int(os.environ.get("PYTEST_TRENDS_BASE_PORT", "29000"))
    port, ui = base + 70, base + 71
    logs = tmp_path_factory.mktemp("spark-standalone")
    procs: list[subprocess.Popen] = []
    try:
        master = _spark_class("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                              "--webui-port", str(ui), log=logs / "master.log")
        procs.append(master)
        _wait_port(port, master, logs / "master.log")
        work_dirs = [logs / f"work-{n}" for n in range(WORKERS)]
        for n, work in enumerate(work_dirs):
            procs.append(_spark_class(
                "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                "--webui-port", str(base + 72 + n), "--work-dir", str(work), f"spark://127.0.0.1:{port}",
                log=logs / f"worker-{n}.log"))
        for n in range(WORKERS):
            _wait_for("Successfully registered with master", procs[1 + n], logs / f"worker-{n}.log")
        yield f"spark://127.0.0.1:{port}", work_dirs
    finally:
        _stop(procs)


def _python_without_the_project(folder: Path) -> str:
    """An interpreter for the executors: the venv's Python with its site hooks off (-S), so neither the editable
    install nor any .pth file is seen, and its site-packages put at the end of PYTHONPATH (the dependencies):
    like a cluster whose Python has the dependencies, where only spark-submit brings the project."""
    script = folder / "python-without-project"
    site_packages = sysconfig.get_paths()["purelib"]
    script.write_text(f'#!/bin/sh\nPYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{site_packages}" '
                      f'exec "{sys.executable}" -S "$@"\n')
    script.chmod(0o755)
    return str(script)


@pytest.fixture(scope="module")
def both(stack, spark, cluster, tmp_path_factory):
    """One stream on this module's topics, archived through spark-submit on the cluster; a copy of that archive
    in a second lake; the daily job through spark-submit on the cluster on the first, and in-process on local[2]
    (the session fixture) on the copy, with another Redis db. Yields (cluster settings, local settings, stream,
    the cluster's job results)."""
    master, _ = cluster
    own = isolated(stack, f"submit-{int(time.time())}", redis_db=5)
    kafka_io.ensure_topics(own.kafka)
    stream = Stream(GenConfig(seed=0x5B, start_ms=parse_timestamp("2026-10-19T08:00:00Z"), event_rate=1.0,
                              vocabulary=2000, wall_now_ms=int(time.time() * 1000)))
    produce(stream, own, count=1000)
    local = isolated(stack, own.kafka.posts_topic.removesuffix("-posts"), redis_db=6)
    local.spark.lake = Path(f"{own.spark.lake}-local")
    on_cluster = own.model_copy(deep=True)
    on_cluster.spark.master = master
    on_cluster.spark.driver_memory = "512m"
    on_cluster.spark.python = _python_without_the_project(tmp_path_factory.mktemp("executor-python"))
    on_cluster.spark.conf = {"spark.executor.memory": "768m", "spark.cores.max": str(WORKERS)}
    for settings in (on_cluster, local):
        redis_io.client(settings.redis).flushdb()
    results = {"archive": session.submit(on_cluster, "archive", log=lambda _line: None)}
    shutil.copytree(on_cluster.spark.lake, local.spark.lake)  # the same input for both: bronze, silver
    results["daily"] = session.submit(on_cluster, "daily", "--date", DATE, "--run-id", "cluster-daily",
                                      log=lambda _line: None)
    jobs.daily(spark, local, parse_day(DATE), "local-daily")
    return on_cluster, local, stream, results


def test_archive_on_the_cluster_holds_the_stream_and_the_executors_got_the_code(both, spark, cluster):
    on_cluster, _, stream, results = both
    assert results["archive"]["records"] > stream.truth.posts
    lake, truth = Lake.of(on_cluster), stream.truth
    assert delta.read(spark, lake, tables.POSTS).count() == truth.posts
    assert delta.read(spark, lake, tables.MENTIONS).count() == sum(truth.mentions.values())
    assert delta.read(spark, lake, tables.QUARANTINE).count() == len(truth.malformed)
    _, work_dirs = cluster
    for work in work_dirs:  # each worker's executors fetched the code zip spark-submit shipped
        assert list(work.glob("app-*/*/trends-*.zip")), work


def test_the_daily_job_on_the_cluster_equals_local(both, spark):
    on_cluster, local, _, results = both
    assert results["daily"]["rows"][tables.HOURLY] > 0 and results["daily"]["rows"][tables.DAILY] > 0
    for table in COMPARED:
        rows = [sorted(tuple(r) for r in delta.read(spark, Lake.of(s), table).collect()) for s in (on_cluster, local)]
        assert rows[0], table
        assert rows[0] == rows[1], table
    views = [keys.exact_hour("all", parse_hour(HOUR)), keys.exact_day("all", parse_day(DATE))]
    clients = [redis_io.client(s.redis) for s in (on_cluster, local)]
    for view in views:
        published = [c.hgetall(view) for c in clients]
        assert published[0] and published[0] == published[1], view
