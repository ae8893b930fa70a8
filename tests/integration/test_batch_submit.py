"""spark-submit on a real Spark standalone cluster (master + worker from the pyspark install, on 127.0.0.1).

The archive job runs through `batch/submit.py` on the cluster (its parse UDF on the worker's Python)
and the tables it writes hold exactly the generated stream.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from adapters import kafka as kafka_io
from batch import delta, tables
from batch.session import submit_argv
from batch.tables import Lake
from tests.integration.test_batch import isolated
from trendcore.events import parse_timestamp
from trendcore.settings import to_env
from trends.gen.model import GenConfig, Stream
from trends.gen.run import produce
from trends.stack.procs import port_open

pytestmark = pytest.mark.integration


def _spark_class(*args: str, log: Path) -> subprocess.Popen:
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1"}
    with open(log, "ab") as out:
        return subprocess.Popen([str(spark_class), *args], stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def _wait_port(port: int, proc: subprocess.Popen, log: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"exited: {log.read_text()[-2000:]}")
        if port_open("127.0.0.1", port):
            return
        time.sleep(0.5)
    raise AssertionError(f"port {port} not open: {log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def cluster(settings, tmp_path_factory):
    """A standalone master and one worker (1 core, 1 GB), stopped by PID at the end."""
    base = int(os.environ.get("PYTEST_TRENDS_BASE_PORT", "29000"))
    port, ui, worker_ui = base + 70, base + 71, base + 72
    logs = tmp_path_factory.mktemp("spark-standalone")
    procs = []
    try:
        master = _spark_class("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                              "--webui-port", str(ui), log=logs / "master.log")
        procs.append(master)
        _wait_port(port, master, logs / "master.log")
        worker = _spark_class("org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1",
                              "--memory", "1g", "--webui-port", str(worker_ui), f"spark://127.0.0.1:{port}",
                              log=logs / "worker.log")
        procs.append(worker)
        deadline = time.monotonic() + 120
        while "Successfully registered with master" not in (logs / "worker.log").read_text(errors="replace"):
            assert time.monotonic() < deadline and worker.poll() is None, (logs / "worker.log").read_text()[-2000:]
            time.sleep(0.5)
        yield f"spark://127.0.0.1:{port}"
    finally:
        for proc in reversed(procs):
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(proc.pid, signal.SIGKILL)


def test_archive_job_runs_unchanged_on_a_standalone_cluster(stack, spark, cluster):
    own = isolated(stack, f"submit-{int(time.time())}", redis_db=5)
    kafka_io.ensure_topics(own.kafka)
    stream = Stream(GenConfig(seed=0x5B, start_ms=parse_timestamp("2026-10-19T08:00:00Z"), event_rate=1.0,
                              vocabulary=2000, wall_now_ms=int(time.time() * 1000)))
    produce(stream, own, count=1000)
    own.spark.driver_memory = "512m"
    env = {**os.environ, **to_env(own), "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(submit_argv(own, cluster, "archive"), capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert '"records"' in done.stdout.strip().splitlines()[-1]
    lake, truth = Lake.of(own), stream.truth
    assert delta.read(spark, lake, tables.POSTS).count() == truth.posts
    assert delta.read(spark, lake, tables.MENTIONS).count() == sum(truth.mentions.values())
    assert delta.read(spark, lake, tables.QUARANTINE).count() == len(truth.malformed)
