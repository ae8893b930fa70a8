"""The driver JVM's class archive options: which file, when it is used, and that a new jar set gets a new file."""

from __future__ import annotations

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
    return Settings(stack={"jars": jars}, spark=spark)


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
