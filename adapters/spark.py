"""Spark session with Delta Lake, built from local jars (nothing is downloaded at start)."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

from trendcore.errors import ConfigError
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


def delta_jars(settings: Settings) -> list[str]:
    """The jars Spark needs beyond its own for Delta Lake and the Kafka source."""
    folder = Path(settings.stack.jars) / "delta"
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    if not any("delta-spark" in j for j in jars):
        raise ConfigError(f"no Delta jars in {folder}: run scripts/bootstrap.sh (or `make bootstrap`)")
    return jars


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


def spark_session(settings: Settings, app_name: str, record_classes_to: Path | None = None):
    """A SparkSession on `settings.spark.master` with Delta enabled and UTC as the session zone; its JVM
    starts from the class archive if there is one, or records one into `record_classes_to`."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # local workers run our venv (redis, trendcore deps)
    from pyspark.sql import SparkSession  # imported here so the CLI starts fast without Spark

    builder = (
        SparkSession.builder.appName(app_name)
        .master(settings.spark.master)
        .config("spark.jars", ",".join(delta_jars(settings)))
        .config("spark.driver.memory", settings.spark.driver_memory)
        .config("spark.sql.shuffle.partitions", str(settings.spark.shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.databricks.delta.snapshotPartitions", "4")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config(map=SESSION_CONF)
    )
    java_options = driver_java_options(settings, record_classes_to)
    if java_options:
        builder = builder.config("spark.driver.extraJavaOptions", java_options)
    return builder.getOrCreate()


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
