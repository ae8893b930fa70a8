"""Spark options: the driver JVM's class archive (which file, when it is used, a new jar set gets a new file), the
driver's addresses and any Spark configuration from settings, and the spark-submit command line with the code
it ships."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from adapters.spark import class_archive_path, driver_java_options
from trendcore.errors import ConfigError
from trendcore.settings import Settings


def _settings(jars: Path, **spark) -> Settings:
    (jars / "delta").mkdir(parents=True, exist_ok=True)
    jar = jars / "delta" / "delta-spark_4.2_2.13-4.4.1.jar"
    if not jar.exists():
        jar.write_bytes(b"jar")
    return Settings(home=jars / "home", stack={"jars": jars}, spark=spark)  # the code zip goes under home


def test_no_archive_no_option(tmp_path):
    assert driver_java_options(_settings(tmp_path)) == ""


def test_an_existing_archive_is_mapped_unless_turned_off(tmp_path):
    settings = _settings(tmp_path)
    archive = class_archive_path(settings)
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"")
    assert f"-XX:SharedArchiveFile={archive}" in driver_java_options(settings).split()
    assert driver_java_options(_settings(tmp_path, class_archive=False)) == ""


def test_recording_writes_to_the_given_file(tmp_path):
    options = driver_java_options(_settings(tmp_path), record_to=tmp_path / "x.jsa")
    assert f"-XX:ArchiveClassesAtExit={tmp_path / 'x.jsa'}" in options.split()
    assert "SharedArchiveFile" not in options


def test_another_jar_set_gets_another_archive(tmp_path):
    settings = _settings(tmp_path)
    before = class_archive_path(settings)
    assert before.parent == tmp_path / "cds" and before.suffix == ".jsa"
    (tmp_path / "delta" / "delta-storage-4.4.1.jar").write_bytes(b"more")
    assert class_archive_path(settings) != before


def test_no_delta_jars_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError):
        class_archive_path(Settings(stack={"jars": tmp_path}))


# The driver's addresses, any Spark configuration, and what spark-submit ships (batch/session.py).


def test_driver_addresses_and_any_conf_come_from_settings(tmp_path):
    from adapters.spark import session_conf

    settings = _settings(tmp_path, driver_host="10.1.2.3", driver_bind_address="0.0.0.0",
                         conf={"spark.executor.memory": "3g", "spark.sql.shuffle.partitions": "64"})
    conf = session_conf(settings)
    assert conf["spark.driver.host"] == "10.1.2.3" and conf["spark.driver.bindAddress"] == "0.0.0.0"
    assert conf["spark.executor.memory"] == "3g"
    assert conf["spark.sql.shuffle.partitions"] == "64"  # the operator's value wins over the project's
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    defaults = session_conf(_settings(tmp_path))
    assert defaults["spark.driver.host"] == defaults["spark.driver.bindAddress"] == "127.0.0.1"


def test_conf_is_read_from_one_json_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("TRENDS_SPARK__CONF", '{"spark.executor.memory": "3g", "spark.hadoop.fs.s3a.endpoint": "x", '
                       '"spark.executor.instances": 2, "spark.dynamicAllocation.enabled": false}')
    monkeypatch.setenv("TRENDS_SPARK__DRIVER_HOST", "driver.example")
    settings = Settings(stack={"jars": tmp_path})
    assert settings.spark.conf == {"spark.executor.memory": "3g", "spark.hadoop.fs.s3a.endpoint": "x",
                                   "spark.executor.instances": "2", "spark.dynamicAllocation.enabled": "false"}
    assert settings.spark.driver_host == "driver.example"


def test_jars_and_java_options_add_to_the_operators(tmp_path):
    from adapters.spark import driver_options, session_conf, session_jars

    settings = _settings(tmp_path, conf={"spark.jars": "/opt/hadoop-aws.jar", "spark.driver.extraJavaOptions": "-Dx=1"})
    jars = session_jars(settings)
    assert jars[-1] == "/opt/hadoop-aws.jar" and any("delta-spark" in j for j in jars)
    archive = class_archive_path(settings)
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"")
    assert driver_options(settings).split()[0] == f"-XX:SharedArchiveFile={archive}"
    assert driver_options(settings).endswith("-Dx=1")
    assert "spark.jars" not in session_conf(settings)


def test_local_ip_is_the_bind_address_unless_a_wildcard(tmp_path):
    from adapters.spark import local_ip

    assert local_ip(_settings(tmp_path)) == "127.0.0.1"
    assert local_ip(_settings(tmp_path, driver_bind_address="10.0.0.7")) == "10.0.0.7"
    assert local_ip(_settings(tmp_path, driver_bind_address="0.0.0.0")) is None


def _conf_of(argv: list[str]) -> dict[str, str]:
    pairs = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--conf"]
    return dict(pair.split("=", 1) for pair in pairs)


def _option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_submit_on_a_cluster_names_no_local_python_unless_told(tmp_path):
    import sys

    from batch.session import submit_argv

    settings = _settings(tmp_path, master="spark://master:7077", conf={"spark.executor.cores": "2"})
    argv = submit_argv(settings, "hourly", "--hour", "2026-11-29T19")
    conf = _conf_of(argv)
    assert _option(argv, "--master") == "spark://master:7077"
    assert "spark.pyspark.python" not in conf  # the workers' own PYSPARK_PYTHON or python3
    assert conf["spark.pyspark.driver.python"] == sys.executable  # client mode: the driver runs here
    assert conf["spark.executor.cores"] == "2"
    assert argv[-3:] == ["hourly", "--hour", "2026-11-29T19"] and argv[-4].endswith("batch/submit.py")
    told = _conf_of(submit_argv(_settings(tmp_path, master="spark://m:7077", python="./env/bin/python"), "archive"))
    assert told["spark.pyspark.python"] == "./env/bin/python"
    local = submit_argv(settings, "archive", master="local[1]")
    assert _option(local, "--master") == "local[1]" and _conf_of(local)["spark.pyspark.python"] == sys.executable


def test_submit_ships_the_projects_code_as_a_zip(tmp_path):
    import zipfile

    from batch.session import code_zip, submit_argv

    settings = _settings(tmp_path)
    shipped = Path(_option(submit_argv(settings, "archive"), "--py-files"))
    assert shipped == code_zip(settings) and shipped.parent == tmp_path / "home" / "spark"
    names = zipfile.ZipFile(shipped).namelist()
    for module in ("trendcore/events.py", "trendcore/hashtags.py", "adapters/redis.py", "batch/jobs.py",
                   "batch/publish.py"):
        assert module in names
    assert not any("__pycache__" in n or n.startswith(("trends/", "speed/", "serving/", "tests/")) for n in names)
    before = shipped.read_bytes()
    assert code_zip(settings).read_bytes() == before  # same code, same file, same bytes
    shipped.unlink()
    assert code_zip(settings).read_bytes() == before
    old, recent = shipped.with_name("trends-0.zip"), shipped.with_name("trends-1.zip")
    for stale in (old, recent):
        stale.write_bytes(b"older code")
    os.utime(old, (0, 0))
    shipped.unlink()
    code_zip(settings)  # a new version: zips unused for a week go
    assert not old.exists() and recent.exists() and shipped.read_bytes() == before


def test_submit_env_passes_the_settings_and_the_local_ip(tmp_path):
    from batch.session import submit_env

    settings = _settings(tmp_path, master="spark://m:7077", conf={"spark.executor.memory": "3g"})
    env = submit_env(settings, base={"PATH": "/bin"})
    assert env["TRENDS_SPARK__MASTER"] == "spark://m:7077" and env["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert env["TRENDS_SPARK__CONF"] == '{"spark.executor.memory": "3g"}'
    assert submit_env(settings, base={"SPARK_LOCAL_IP": "10.0.0.9"})["SPARK_LOCAL_IP"] == "10.0.0.9"


def test_an_asset_uri_is_the_lakes_own_or_a_file_uri(tmp_path):
    from batch.tasks import table_uri

    settings = _settings(tmp_path)
    settings.spark.lake = tmp_path / "lake"
    assert table_uri(settings, "mentions") == (tmp_path / "lake" / "mentions").as_uri()
    settings.spark.lake = "s3a://bucket/lake/"  # type: ignore[assignment]
    assert table_uri(settings, "mentions") == "s3a://bucket/lake/mentions"


# The S3A connector (<jars>/s3) of an S3 lake: on the driver's class path on local[*], shipped to a cluster.


def _s3_jars(jars: Path) -> None:
    (jars / "s3").mkdir(parents=True, exist_ok=True)
    for name in ("hadoop-aws-3.5.0.jar", "bundle-2.35.4.jar"):
        (jars / "s3" / name).write_bytes(b"jar")


def test_an_s3_lake_on_local_puts_the_connector_on_the_class_path_only(tmp_path):
    from adapters.spark import DRIVER_CLASSPATH, session_conf, session_jars

    _s3_jars(tmp_path)
    settings = _settings(tmp_path, lake="s3a://bucket/lake", conf={DRIVER_CLASSPATH: "/opt/extra.jar"})
    assert session_conf(settings)[DRIVER_CLASSPATH] == os.pathsep.join([f"{tmp_path}/s3/*", "/opt/extra.jar"])
    assert not any("/s3/" in jar for jar in session_jars(settings))


def test_an_s3_lake_on_a_cluster_ships_the_connector(tmp_path):
    from adapters.spark import DRIVER_CLASSPATH, session_conf, session_jars

    _s3_jars(tmp_path)
    settings = _settings(tmp_path, lake="s3a://bucket/lake", master="spark://10.0.0.1:7077")
    assert {Path(j).name for j in session_jars(settings)} >= {"hadoop-aws-3.5.0.jar", "bundle-2.35.4.jar"}
    assert DRIVER_CLASSPATH not in session_conf(settings)


def test_a_folder_lake_needs_no_connector_and_a_missing_one_is_named(tmp_path):
    from adapters.spark import DRIVER_CLASSPATH, session_conf, session_jars

    assert DRIVER_CLASSPATH not in session_conf(_settings(tmp_path, lake=str(tmp_path / "lake")))
    with pytest.raises(ConfigError, match="hadoop-aws"):
        session_jars(_settings(tmp_path, lake="s3a://bucket/lake", master="spark://10.0.0.1:7077"))
