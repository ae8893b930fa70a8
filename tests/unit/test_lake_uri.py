"""The lake setting takes a path or a URI, and every reader and writer joins table names onto it alike."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from batch.tables import Lake
from trendcore.lake import LakeUri, delta_rs_storage_options, is_local, join, parse_lake, resolve
from trendcore.settings import Settings, to_env


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    for name in list(os.environ):
        if name.upper().startswith("TRENDS_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize(("given", "root"), [
    ("s3a://bucket/lake", LakeUri("s3a://bucket/lake")),
    ("S3A://bucket//trends/lake/", LakeUri("s3a://bucket/trends/lake")),
    ("s3a://bucket", LakeUri("s3a://bucket")),
    ("hdfs://namenode:8020/lake", LakeUri("hdfs://namenode:8020/lake")),
    ("file:///data/lake", Path("/data/lake")),
    ("file:/data/my%20lake", Path("/data/my lake")),
    ("/data/lake", Path("/data/lake")),
    ("lake", Path("lake")),
])
def test_a_lake_is_a_path_or_a_uri(given, root):
    parsed = parse_lake(given)
    assert parsed == root and type(parsed) is type(root)


@pytest.mark.parametrize(("given", "says"), [
    ("s3a:/bucket/lake", "two slashes"),  # what pathlib makes of s3a://bucket/lake
    ("s3a:///lake", "names its bucket"),
    ("s3a://bucket/lake?x=1", "no query"),
    ("file://elsewhere/lake", "on this machine"),
])
def test_a_broken_uri_is_refused_saying_why(given, says):
    with pytest.raises(ValueError, match=says):
        parse_lake(given)


def test_the_setting_keeps_a_uri_and_round_trips_through_the_environment(monkeypatch):
    monkeypatch.setenv("TRENDS_SPARK__LAKE", "s3a://bucket/trends/")
    settings = Settings()
    assert settings.spark.lake == "s3a://bucket/trends" and isinstance(settings.spark.lake, LakeUri)
    assert to_env(settings)["TRENDS_SPARK__LAKE"] == "s3a://bucket/trends"
    assert Lake.of(settings).path("mentions") == "s3a://bucket/trends/mentions"
    assert Lake.of(settings).checkpoint == "s3a://bucket/trends/_checkpoints/archive"


def test_the_default_lake_stays_under_trends_home(tmp_path):
    settings = Settings()
    assert settings.spark.lake == tmp_path / "var" / "lake"
    assert Lake.of(settings).path("posts") == f"{tmp_path}/var/lake/posts" and Lake.of(settings).is_local


def test_a_mangled_uri_stops_the_settings(monkeypatch):
    monkeypatch.setenv("TRENDS_SPARK__LAKE", "s3a:/bucket/lake")
    with pytest.raises(ValidationError, match="two slashes"):
        Settings()


def test_a_sub_lake_is_built_the_same_way_for_paths_and_uris():
    assert LakeUri("s3a://b/lake") / "test-1" == LakeUri("s3a://b/lake/test-1")
    assert isinstance(LakeUri("s3a://b") / "x", LakeUri)
    assert join("s3a://b/lake/", "t") == "s3a://b/lake/t" and join(Path("/l"), "_checkpoints", "archive") == \
        "/l/_checkpoints/archive"
    assert join("/", "t") == "/t"
    uri = LakeUri("s3a://bucket/a/b")
    assert (uri.scheme, uri.bucket, uri.key) == ("s3a", "bucket", "a/b")


def test_which_lakes_are_local():
    assert is_local(Path("lake")) and is_local("/data/lake") and is_local("file:///data/lake")
    assert not is_local("s3a://b/lake") and not is_local(LakeUri("gs://b/lake"))


def test_a_notebook_parameter_resolves_against_trends_home():
    home = Path("/srv/trends")
    assert resolve("", home, Path("/srv/trends/lake")) == "/srv/trends/lake"
    assert resolve("", home, LakeUri("s3a://b/lake")) == "s3a://b/lake"
    assert resolve("lake2", home, Path("/x")) == "/srv/trends/lake2"
    assert resolve("/abs/lake", home, Path("/x")) == "/abs/lake"
    assert resolve("s3a://b/other/", home, Path("/x")) == "s3a://b/other"


def test_delta_rs_gets_the_s3_settings_spark_has():
    conf = {"spark.hadoop.fs.s3a.endpoint": "127.0.0.1:9000", "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
            "spark.hadoop.fs.s3a.access.key": "k", "spark.hadoop.fs.s3a.secret.key": "s",
            "spark.hadoop.fs.s3a.path.style.access": "true", "spark.executor.memory": "4g"}
    assert delta_rs_storage_options("s3a://b/lake", conf) == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "us-east-1", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false"}
    assert delta_rs_storage_options("s3a://b/lake", {"spark.hadoop.fs.s3a.endpoint.region": "eu-west-1"}) == {
        "AWS_REGION": "eu-west-1"}
    assert delta_rs_storage_options("/local/lake", conf) == {}
    assert delta_rs_storage_options("gs://b/lake", conf) == {}
