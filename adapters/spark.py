"""Spark session with Delta Lake, built from local jars (nothing is downloaded at start)."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

from trendcore.errors import ConfigError
from trendcore.lake import S3_SCHEMES, LakeUri
from trendcore.settings import Settings

SESSION_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
    # A compacted day's tag column overflows Parquet's default 1 MB dictionary page and falls back to
    # plain strings, which makes OPTIMIZE grow the table instead of shrinking it; 8 MB keeps it
    # dictionary-encoded (figures in docs/performance-log.md).
    "spark.hadoop.parquet.dictionary.page.size": str(8 * 1024 * 1024),
}
"""Settings every session needs, ours or spark-submit's (batch/session.py passes them as --conf)."""

WILDCARD_ADDRESSES = {"0.0.0.0", "::", "[::]"}
"""Bind addresses that mean every interface: no SPARK_LOCAL_IP can be derived from them."""

DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
"""The driver JVM's options: the class archive's and the operator's, joined."""

DRIVER_CLASSPATH = "spark.driver.extraClassPath"
"""The driver JVM's extra class path: the S3A connector on local[*] and the operator's, joined."""


def delta_jars(settings: Settings) -> list[str]:
    """The jars Spark needs beyond its own for Delta Lake and the Kafka source."""
    folder = Path(settings.stack.jars) / "delta"
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    if not any("delta-spark" in j for j in jars):
        raise ConfigError(f"no Delta jars in {folder}: run scripts/bootstrap.sh (or `make bootstrap`)")
    return jars


def s3_jars(settings: Settings) -> list[str]:
    """hadoop-aws and the AWS SDK (<jars>/s3, from scripts/bootstrap.sh) when the lake is on S3; else none."""
    lake = settings.spark.lake
    if not isinstance(lake, LakeUri) or lake.scheme not in S3_SCHEMES:
        return []
    folder = Path(settings.stack.jars) / "s3"
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    if not any("hadoop-aws" in j for j in jars):
        raise ConfigError(f"the lake {lake} is on S3 but {folder} has no hadoop-aws jar: run scripts/bootstrap.sh")
    return jars


def session_jars(settings: Settings) -> list[str]:
    """The Delta and Kafka jars, then on a cluster the S3A connector of an S3 lake (`s3_jars`: Spark ships
    them to the executors), then any the operator lists in `spark.conf["spark.jars"]`."""
    extra = settings.spark.conf.get("spark.jars", "")
    shipped = [] if is_local(settings.spark.master) else s3_jars(settings)
    return [*delta_jars(settings), *shipped, *(j.strip() for j in extra.split(",") if j.strip())]


def driver_classpath(settings: Settings) -> str:
    """spark.driver.extraClassPath: on local[*] the S3A connector of an S3 lake (local executors live in the
    driver's JVM, and spark.jars would copy its 680 MB into every session), then the operator's."""
    own = [str(Path(settings.stack.jars) / "s3" / "*")] if is_local(settings.spark.master) and s3_jars(settings) else []
    operator = settings.spark.conf.get(DRIVER_CLASSPATH, "")
    return os.pathsep.join([*own, *([operator] if operator else [])])


def class_archive_path(settings: Settings) -> Path:
    """Where the JVM class archive (CDS) for this JDK, pyspark and these jars lives: a new JDK or jar set
    gets a new file name, so an archive is never used with classes it was not made from."""
    import pyspark

    java_home = os.environ.get("JAVA_HOME")
    java = Path(java_home, "bin", "java") if java_home else Path(shutil.which("java") or "java")
    parts = [str(java.resolve()), pyspark.__version__, *(f"{j}:{Path(j).stat().st_size}" for j in delta_jars(settings))]
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]
    return Path(settings.stack.jars) / "cds" / f"spark-{key}.jsa"


def driver_java_options(settings: Settings, record_to: Path | None = None) -> str:
    """JVM options of the driver: load classes from the class archive when there is one, or (`record_to`)
    write one at exit. Class data sharing maps the parsed classes of Spark and Hadoop instead of
    reading and verifying thousands of them from jars at every start."""
    quiet = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # a stale archive is skipped without a warning per class
    if record_to is not None:
        return f"-XX:ArchiveClassesAtExit={record_to} {quiet}"
    archive = class_archive_path(settings)
    return f"-XX:SharedArchiveFile={archive} {quiet}" if settings.spark.class_archive and archive.exists() else ""


def is_local(master: str) -> bool:
    """True for a master that runs everything in this JVM (local, local[n], local[*])."""
    return master == "local" or master.startswith("local[")


def executor_python(settings: Settings, master: str | None = None) -> str | None:
    """The Python the executors run: the setting; else, on local[*] (`master`, default the setting's), this
    interpreter (our venv, with redis and the project's dependencies); else None (the cluster's default)."""
    if settings.spark.python:
        return settings.spark.python
    return sys.executable if is_local(master or settings.spark.master) else None


def session_conf(settings: Settings) -> dict[str, str]:
    """Every Spark setting of our sessions, spark-submit's too: the project's own, the driver's addresses, then
    `spark.conf` (which wins). The jars and the driver's JVM options are apart (`session_jars`, `driver_options`):
    they add to the operator's instead of replacing them."""
    spark = settings.spark
    return {
        "spark.driver.memory": spark.driver_memory,
        "spark.sql.shuffle.partitions": str(spark.shuffle_partitions),
        "spark.ui.enabled": "false",
        "spark.databricks.delta.snapshotPartitions": "4",
        "spark.driver.host": spark.driver_host,
        "spark.driver.bindAddress": spark.driver_bind_address,
        **SESSION_CONF,
        **{k: v for k, v in spark.conf.items() if k not in ("spark.jars", DRIVER_JAVA_OPTIONS, DRIVER_CLASSPATH)},
        **({DRIVER_CLASSPATH: classpath} if (classpath := driver_classpath(settings)) else {}),
    }


def driver_options(settings: Settings, record_to: Path | None = None) -> str:
    """The driver's JVM options: the class archive's (`driver_java_options`), then the operator's
    `spark.conf["spark.driver.extraJavaOptions"]`."""
    own = driver_java_options(settings, record_to)
    return " ".join(o for o in (own, settings.spark.conf.get(DRIVER_JAVA_OPTIONS, "")) if o)


def local_ip(settings: Settings) -> str | None:
    """The SPARK_LOCAL_IP our Spark processes get unless the environment sets one: the driver's bind address,
    none for a wildcard (Spark then resolves the host name)."""
    address = settings.spark.driver_bind_address
    return None if address in WILDCARD_ADDRESSES else address


def spark_session(settings: Settings, app_name: str, record_classes_to: Path | None = None):
    """A SparkSession on `settings.spark.master` with Delta enabled and UTC as the session zone; its JVM
    starts from the class archive if there is one, or records one into `record_classes_to`."""
    if (ip := local_ip(settings)) is not None:
        os.environ.setdefault("SPARK_LOCAL_IP", ip)
    if settings.spark.python:
        os.environ["PYSPARK_PYTHON"] = settings.spark.python  # read by SparkContext when it starts
    elif is_local(settings.spark.master):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # local workers run our venv
    from pyspark.sql import SparkSession  # imported here so the CLI starts fast without Spark

    conf = {**session_conf(settings), "spark.jars": ",".join(session_jars(settings))}
    if java_options := driver_options(settings, record_classes_to):
        conf[DRIVER_JAVA_OPTIONS] = java_options
    return SparkSession.builder.appName(app_name).master(settings.spark.master).config(map=conf).getOrCreate()


def stop_jvm(spark, timeout_s: float = 600) -> None:
    """Stop the session and the JVM behind it (it exits at the end of its input, so at-exit work such as a
    class archive completes); the next `spark_session` in this process starts a new JVM."""
    from pyspark import SparkContext

    spark.stop()
    gateway = SparkContext._gateway
    if gateway is None:
        return
    gateway.proc.stdin.close()
    gateway.proc.wait(timeout=timeout_s)
    gateway.close()
    SparkContext._gateway = SparkContext._jvm = None
