"""Shared fixtures. Integration fixtures start ONE real stack per test session through the
project's own stack manager, on test ports (PYTEST_TRENDS_BASE_PORT, default 29000) and a test
home (the checkout's var/test-<base>), and stop it at the end: a running demo stack is never touched."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from trendcore.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
"""The checkout: test data lives under its var/, wherever pytest runs from."""


def _bootstrapped_jars() -> Path:
    """The jars scripts/bootstrap.sh resolved: where the settings put them when read in the checkout."""
    with contextlib.chdir(ROOT):
        return Settings().stack.jars


def _test_settings() -> Settings:
    base = int(os.environ.get("PYTEST_TRENDS_BASE_PORT", "29000"))
    home = ROOT / "var" / f"test-{base}"  # each path set here, so an operator's TRENDS_ paths never leak in
    return Settings(
        home=home,
        stack={"home": home, "jars": _bootstrapped_jars(), "kafka_controller_port": base + 93,
               "kafka_sasl_port": base + 94,  # the same broker's SASL_SSL listener (test_kafka_security.py)
               "redis_tls_port": base + 78},  # the same Redis's TLS listener (test_redis_tls.py)
        kafka={"bootstrap": f"127.0.0.1:{base + 92}", "partitions": 4},
        redis={"url": f"redis://127.0.0.1:{base + 79}/0"},
        spark={"master": "local[2]", "lake": home / "lake"},
        speed={"metrics_port": base + 8},
        api={"port": base + 80},
        airflow={"home": home / "airflow", "port": base + 81},
    )


@pytest.fixture(scope="session")
def settings() -> Settings:
    """Settings pointing at the test stack (nothing is started by this fixture)."""
    return _test_settings()


@pytest.fixture(scope="session")
def stack(settings: Settings) -> Iterator[Settings]:
    """A real Kafka broker and Redis server for the whole session, started and stopped by us."""
    from trends.stack import manager

    manager.up(settings, names=["redis", "kafka"], log=lambda _msg: None)
    try:
        yield settings
    finally:
        manager.down(settings, log=lambda _msg: None)


@pytest.fixture(scope="session")
def spark(settings: Settings):
    """One local Spark session with Delta Lake for the whole test session; the S3A connector (<jars>/s3) is on
    its class path too, for test_lake_s3's bucket lake (the session's own lake is a folder)."""
    from adapters.spark import DRIVER_CLASSPATH, spark_session

    with_s3 = settings.model_copy(deep=True)
    with_s3.spark.conf = {**settings.spark.conf, DRIVER_CLASSPATH: str(Path(settings.stack.jars) / "s3" / "*")}
    session = spark_session(with_s3, "trends-tests")
    try:
        yield session
    finally:
        session.stop()
        # py4j logs "Closing down clientserver connection" from __del__ at interpreter exit, after
        # pytest closed its log capture stream: a harmless but alarming "Logging error" trace
        logging.getLogger("py4j").setLevel(logging.WARNING)
