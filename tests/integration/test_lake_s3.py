"""A lake on an object store: the archive, hourly and daily jobs and the notebooks on `s3a://`, against a real
S3-protocol server (s3proxy, tests/integration/s3server.py) started on loopback for this module."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import Counter

import pytest

from batch import delta, tables
from batch.tables import Lake
from tests.integration import s3server
from tests.integration.lakes import fill, isolated, outputs, row_counts, run_notebook
from trendcore.lake import LakeUri

pytestmark = pytest.mark.integration

START = "2026-10-08T14:00:00Z"
PORT_OFFSET = 71
"""s3proxy listens on PYTEST_TRENDS_BASE_PORT + 71."""


@pytest.fixture(scope="module")
def s3(stack):
    """One s3proxy for the module (the only one of the test session), stopped at the end."""
    base = int(os.environ.get("PYTEST_TRENDS_BASE_PORT", "29000"))  # as tests/conftest.py derives its ports
    server = s3server.start(stack.stack.jars, stack.home / "s3proxy", base + PORT_OFFSET)
    try:
        yield server
    finally:
        s3server.stop(server)
        shutil.rmtree(server.basedir, ignore_errors=True)  # the buckets' files; the log stays for a post-mortem


@pytest.fixture(scope="module")
def world(stack, spark, s3):
    """A lake in a bucket of the S3 server, filled by the real jobs; yields (settings, stream, bucket root)."""
    _require_s3a(spark)
    for key, value in s3.hadoop_conf().items():  # this session was built before the server had a port
        spark.conf.set(key, value)
    name = f"s3-{int(time.time())}"
    bucket = s3.bucket("lake")
    own = isolated(stack, name, LakeUri(bucket) / name)
    own.spark.conf = {**own.spark.conf, **s3.spark_conf()}  # what TRENDS_SPARK__CONF carries in production
    return own, fill(spark, own, START, posts=1000, seed=23, hours=1), bucket


def _require_s3a(spark) -> None:
    """Fail, saying why, when the session lacks the S3A connector (scripts/bootstrap.sh puts it in <jars>/s3)."""
    try:
        jvm = spark._jvm
        jvm.java.lang.Class.forName("org.apache.hadoop.fs.s3a.S3AFileSystem", False,
                                    jvm.java.lang.Thread.currentThread().getContextClassLoader())
    except Exception as exc:  # py4j: Py4JJavaError wrapping ClassNotFoundException
        pytest.fail(f"the Spark session has no hadoop-aws (<jars>/s3 on its class path): {str(exc).splitlines()[0]}")


def test_the_jobs_write_exact_counts_into_the_bucket(world, spark, s3):
    own, stream, _ = world
    lake = Lake.of(own)
    assert lake.root.startswith("s3a://lake/") and not lake.is_local
    daily = delta.read(spark, lake, tables.DAILY).where("region = 'all'").collect()
    assert Counter({r["tag"]: r["mentions"] for r in daily}) == stream.truth.counts()
    name = lake.root.rsplit("/", 1)[1]
    stored = s3.basedir / "lake" / name
    assert {t for t in tables.ALL_TABLES if (stored / t / "_delta_log").is_dir()} == set(tables.ALL_TABLES)
    assert any((stored / "_checkpoints" / "archive" / "offsets").iterdir()), "the archive's checkpoint is in S3"


def test_s3a_uploads_in_parts_renames_by_copy_and_lists_on_this_server(world, spark, s3):
    """The S3 calls the product relies on: a multipart upload (a file above fs.s3a.multipart.size), a rename
    (copy + delete: the streaming checkpoint commits that way) and a listing."""
    _, _, bucket = world
    jvm = spark._jvm
    hadoop = spark._jsparkSession.sessionState().newHadoopConf()
    for key, value in s3.hadoop_conf().items():
        hadoop.set(key, value)
    source, target = jvm.org.apache.hadoop.fs.Path(f"{bucket}/probe/big.bin"), jvm.org.apache.hadoop.fs.Path(
        f"{bucket}/probe/moved.bin")
    fs = jvm.org.apache.hadoop.fs.FileSystem.newInstance(source.toUri(), hadoop)  # its own statistics
    size = 12 << 20
    out = fs.create(source, True)
    for _ in range(size >> 20):
        out.write(bytearray(os.urandom(1 << 20)))
    out.close()
    parts = fs.getFileStatus(source).getEtag().strip('"').rpartition("-")[2]
    assert parts.isdigit() and int(parts) == 3, "an ETag md5-N: stored by a multipart upload of N parts"
    assert fs.rename(source, target) and not fs.exists(source)
    assert [s.getPath().getName() for s in fs.listStatus(target.getParent())] == ["moved.bin"]
    assert (s3.basedir / "lake" / "probe" / "moved.bin").stat().st_size == size == fs.getFileStatus(target).getLen()
    fs.close()


def test_rerunning_the_archive_on_s3_adds_nothing(world, spark):
    from batch import archive

    own, _, _ = world
    lake = Lake.of(own)
    before = delta.read(spark, lake, tables.BRONZE_POSTS).count()
    assert archive.run(spark, own).records == 0
    assert delta.read(spark, lake, tables.BRONZE_POSTS).count() == before


def test_delta_rs_reads_every_table_on_s3_with_sparks_row_counts(world, spark):
    own, _, _ = world
    lake = Lake.of(own)
    options = lake.storage_options(own)
    assert options["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")
    counts = row_counts(spark, lake, options)
    assert {t: pair for t, pair in counts.items() if pair[0] != pair[1] or pair[0] == 0} == {}


def test_notebooks_read_the_s3_lake_with_and_without_spark(world, tmp_path, monkeypatch):
    own, stream, _ = world
    monkeypatch.setenv("TRENDS_SPARK__CONF", json.dumps(own.spark.conf))  # the kernel's Settings() reads it
    top, mentions = stream.truth.counts().most_common(1)[0]
    lake = str(own.spark.lake)
    without = outputs(run_notebook("lake_without_spark", tmp_path, lake=lake))
    assert f"top tag: {top}" in without and f"mentions: {mentions}" in without and "jvm: False" in without
    with_spark = outputs(run_notebook("explore_trends", tmp_path, lake=lake, master="local[1]"))
    assert f"top tag: {top}" in with_spark
