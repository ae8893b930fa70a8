"""The SparkSession of a batch entry point, and spark-submit: the command line, the code it ships, running it.

A job runs either in this process (`get`: ours, or spark-submit's when it launched us) or through
spark-submit (`submit`): Airflow's tasks and `trends batch submit` launch it that way, so the driver
runs where spark-submit puts it and the executors get the project's code as a zip (`--py-files`).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from adapters.spark import (
    SESSION_CONF,
    driver_options,
    executor_python,
    is_local,
    local_ip,
    session_conf,
    session_jars,
    spark_session,
)
from trendcore.errors import ServiceError
from trendcore.process import die_with_parent
from trendcore.settings import Settings, to_env

ROOT = Path(__file__).resolve().parent.parent
"""Where our packages are installed: the checkout in an editable install, site-packages after `pip install .`."""

SHIPPED = ("trendcore", "adapters", "batch")
"""The packages the executors import (UDFs run trendcore and batch code, the publish step adapters.redis)."""

ZIP_TIME = (2020, 1, 1, 0, 0, 0)
"""Every zip entry's timestamp: the same sources give the same bytes, so the same file name."""

ZIP_KEEP_S = 7 * 86_400
"""How long a code zip of an older version is kept: a job that started with it is long done by then."""

SUBMIT_PY = Path(__file__).with_name("submit.py")


def under_spark_submit() -> bool:
    """True when spark-submit launched this Python (it passes the gateway to us)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def get(settings: Settings, app: str):
    """spark-submit's session (its --master and --conf win) or one built from settings (reused if active).

    A session of ours on a cluster gets the project's code too (`addPyFile`): its executors run our UDFs.
    """
    if not under_spark_submit():
        spark = spark_session(settings, app)
        if not is_local(settings.spark.master):
            spark.sparkContext.addPyFile(str(code_zip(settings)))
        return spark
    from pyspark.sql import SparkSession

    # spark-submit passed every setting as --conf already (`submit_argv`); the session's own are set again in
    # case the command line was written by hand
    own = {k: v for k, v in session_conf(settings).items() if k in SESSION_CONF or k == "spark.sql.shuffle.partitions"}
    return SparkSession.builder.appName(app).config(map=own).getOrCreate()


def _sources() -> list[tuple[str, Path]]:
    """(name in the zip, file) of every file of the shipped packages, Python caches left out, sorted."""
    files = []
    for package in SHIPPED:
        for path in (ROOT / package).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                files.append((path.relative_to(ROOT).as_posix(), path))
    return sorted(files)


def code_zip(settings: Settings) -> Path:
    """The project's packages as a zip for `--py-files`, under `$TRENDS_HOME/spark/`, named by its content.

    Built once per version of the code (a few hundred KB, milliseconds); concurrent builders write the same
    bytes and rename them into place, so a task never ships a half-written file.
    """
    sources = [(name, path.read_bytes()) for name, path in _sources()]
    digest = hashlib.sha256()
    for name, data in sources:
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    target = settings.home / "spark" / f"trends-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        os.utime(target)  # in use: not pruned
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=target.parent, suffix=".partial")
    with os.fdopen(fd, "wb") as out, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in sources:
            archive.writestr(zipfile.ZipInfo(name, ZIP_TIME), data)
    os.replace(partial, target)
    _prune(target, ZIP_KEEP_S)
    return target


def _prune(newest: Path, keep_s: float) -> None:
    """Remove the code zips of older versions beside `newest` not used for `keep_s` (one per code change)."""
    now = time.time()
    for old in newest.parent.glob("trends-*.zip"):
        with contextlib.suppress(OSError):
            if old != newest and now - old.stat().st_mtime > keep_s:
                old.unlink()


def submit_conf(settings: Settings, master: str | None = None) -> dict[str, str]:
    """The --conf pairs of spark-submit: the sessions' settings, and which Python runs the driver and executors.

    The driver runs here (client mode), so it runs this interpreter; the executors run `spark.python`, this
    interpreter on local[*], or the cluster's default.
    """
    conf = {k: v for k, v in session_conf(settings).items() if k != "spark.driver.memory"}
    conf["spark.pyspark.driver.python"] = sys.executable
    python = executor_python(settings, master)
    if python is not None:
        conf["spark.pyspark.python"] = python
    return conf


def submit_argv(settings: Settings, *job_args: str, master: str | None = None) -> list[str]:
    """The spark-submit command line running `batch/submit.py <job_args>` on `master` (default
    `spark.master`): our jars, the code zip, the driver's memory and JVM options, every --conf."""
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    argv = [str(spark_home / "bin" / "spark-submit"), "--master", master or settings.spark.master,
            "--deploy-mode", "client", "--jars", ",".join(session_jars(settings)),
            "--py-files", str(code_zip(settings)), "--driver-memory", settings.spark.driver_memory]
    java_options = driver_options(settings)
    if java_options:
        argv += ["--driver-java-options", java_options]
    for key, value in submit_conf(settings, master).items():
        argv += ["--conf", f"{key}={value}"]
    return [*argv, str(SUBMIT_PY), *job_args]


def submit_env(settings: Settings, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of spark-submit: `base` (default ours), `settings` as TRENDS_* (so the driver's
    Settings() equals them) and SPARK_LOCAL_IP from the driver's bind address unless `base` has one."""
    env = {**(os.environ if base is None else base), **to_env(settings)}
    if (ip := local_ip(settings)) is not None:
        env.setdefault("SPARK_LOCAL_IP", ip)
    return env


def submit(settings: Settings, *job_args: str, log: Callable[[str], None] | None = None) -> object:
    """Run a job through spark-submit and return its result (the JSON line `batch/submit.py` prints).

    spark-submit's log goes to `log` line by line (default: our stderr), so an Airflow task's log shows it.
    ServiceError with the end of that log when the job fails; if this process is stopped (Airflow marks the
    task failed, or its execution_timeout passes), spark-submit and its driver are stopped with it.
    """
    argv = submit_argv(settings, *job_args)
    tail: collections.deque[str] = collections.deque(maxlen=40)
    write = log or (lambda line: print(line, file=sys.stderr, flush=True))
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, text=True, errors="replace",
                                env=submit_env(settings), start_new_session=True, preexec_fn=die_with_parent)
        try:
            for line in proc.stderr:  # type: ignore[union-attr]
                tail.append(line.rstrip())
                write(line.rstrip())
            code = proc.wait()
        except BaseException:
            _stop(proc)
            raise
        finally:
            proc.stderr.close()  # type: ignore[union-attr]
        out.seek(0)
        lines = [line for line in out.read().splitlines() if line.startswith(("{", "["))]
    if code != 0 or not lines:
        what = f"exit code {code}" if code != 0 else "no result line"
        raise ServiceError(f"spark-submit {' '.join(job_args)} failed ({what}):\n" + "\n".join(tail))
    return json.loads(lines[-1])


def _stop(proc: subprocess.Popen) -> None:
    """Stop spark-submit's process group (its JVM and the Python driver it started): TERM, then KILL."""
    for sig, wait_s in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait_s)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue
