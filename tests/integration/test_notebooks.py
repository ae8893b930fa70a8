"""The analysts' notebooks run top to bottom (papermill) on a small generated lake, and an independent Delta
reader, delta-rs (`deltalake`, no JVM), reads every table of it like Spark (the S3 lake: test_lake_s3.py)."""

from __future__ import annotations

import json
import time

import pytest
from deltalake import DeltaTable

from batch import delta, tables
from batch.tables import Lake
from tests.integration.lakes import NOTEBOOKS, fill, isolated, outputs, row_counts, run_notebook

pytestmark = pytest.mark.integration

START = "2026-10-06T10:00:00Z"


@pytest.fixture(scope="module")
def lake(stack, spark):
    """Two hours of posts archived and computed by the real batch jobs into a fresh lake."""
    name = f"nb-{int(time.time())}"
    own = isolated(stack, name, stack.spark.lake / name)
    return own, fill(spark, own, START, posts=3000)


def test_explore_trends_finds_the_top_tag(lake, tmp_path):
    own, stream = lake
    top = stream.truth.counts().most_common(1)[0][0]
    out = outputs(run_notebook("explore_trends", tmp_path, lake=str(own.spark.lake), master="local[1]"))
    assert f"top tag: {top}" in out


def test_speed_vs_exact_runs(lake, tmp_path):
    own, _ = lake
    out = outputs(run_notebook("speed_vs_exact", tmp_path, lake=str(own.spark.lake), master="local[1]"))
    assert "top10_recall" in out


def test_tag_lookup_accepts_any_spelling(lake, tmp_path):
    own, stream = lake
    expected = sum(n for (tag, _, _), n in stream.truth.mentions.items() if tag == "worldcup")
    out = outputs(run_notebook("tag_lookup", tmp_path, lake=str(own.spark.lake), master="local[1]", tag="#WORLDCUP"))
    assert f"worldcup {expected} mentions" in out


def test_lake_without_spark_reads_the_gold_tables_without_a_jvm(lake, tmp_path):
    own, stream = lake
    top, mentions = stream.truth.counts().most_common(1)[0]
    out = outputs(run_notebook("lake_without_spark", tmp_path, lake=str(own.spark.lake)))
    assert f"top tag: {top}" in out and f"mentions: {mentions}" in out
    assert "jvm: False" in out


def test_delta_rs_reads_every_table_with_sparks_row_counts(lake, spark):
    own, _ = lake
    local = Lake.of(own)
    assert local.is_local and local.storage_options(own) == {}
    counts = row_counts(spark, local, {})
    assert set(counts) == set(tables.ALL_TABLES)
    assert {t: pair for t, pair in counts.items() if pair[0] != pair[1] or pair[0] == 0} == {}


def test_delta_rs_reads_the_same_rows_of_a_gold_table(lake, spark):
    own, _ = lake
    local, columns = Lake.of(own), ["tag", "region", "hour", "mentions", "distinct_authors"]
    by_spark = sorted(tuple(r) for r in delta.read(spark, local, tables.HOURLY).select(*columns).collect())
    frame = DeltaTable(local.path(tables.HOURLY)).to_pandas(columns=columns)
    assert sorted(frame.itertuples(index=False, name=None)) == by_spark


def test_notebooks_are_stored_without_outputs():
    for path in NOTEBOOKS.glob("*.ipynb"):
        cells = json.loads(path.read_text())["cells"]
        code = [c for c in cells if c["cell_type"] == "code"]
        assert all(not c.get("outputs") and c.get("execution_count") is None for c in code), path
