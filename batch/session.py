"""The SparkSession of a batch entry point: ours locally, spark-submit's when launched by it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from adapters.spark import SESSION_CONF, delta_jars, driver_java_options, spark_session
from trendcore.settings import Settings


def under_spark_submit() -> bool:
    """True when spark-submit launched this Python (it passes the gateway to us)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def get(settings: Settings, app: str):
    """spark-submit's session (its --master wins) or a local one built from settings (reused if active)."""
    if not under_spark_submit():
        return spark_session(settings, app)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app).config(map=SESSION_CONF)
    return builder.config("spark.sql.shuffle.partitions", str(settings.spark.shuffle_partitions)).getOrCreate()


def submit_argv(settings: Settings, master: str, *job_args: str) -> list[str]:
    """The spark-submit command line running `batch/submit.py <job_args>` on `master` (local[*] or spark://)."""
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    conf = {**SESSION_CONF, "spark.pyspark.python": sys.executable, "spark.pyspark.driver.python": sys.executable}
    argv = [str(spark_home / "bin" / "spark-submit"), "--master", master, "--jars", ",".join(delta_jars(settings))]
    argv += ["--driver-memory", settings.spark.driver_memory]
    java_options = driver_java_options(settings)
    if java_options:
        argv += ["--driver-java-options", java_options]
    for key, value in conf.items():
        argv += ["--conf", f"{key}={value}"]
    return [*argv, str(Path(__file__).with_name("submit.py")), *job_args]
