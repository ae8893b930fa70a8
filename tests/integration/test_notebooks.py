"""The analysts' notebooks run top to bottom (papermill) on a small generated lake."""

from __future__ import annotations

import json
import time
from pathlib import Path

import papermill
import pytest

from adapters import kafka as kafka_io
from batch import archive, jobs
from trendcore.events import parse_timestamp
from trendcore.windows import HOUR_MS
from trends.gen.model import GenConfig, Stream
from trends.gen.run import produce

pytestmark = pytest.mark.integration

NOTEBOOKS = Path(__file__).parent.parent.parent / "notebooks"
START = "2026-10-06T10:00:00Z"


@pytest.fixture(scope="module")
def lake(stack, spark):
    """Two hours of posts archived and computed by the real batch jobs into a fresh lake."""
    own = stack.model_copy(deep=True)
    name = f"nb-{int(time.time())}"
    own.kafka.posts_topic, own.kafka.engagements_topic = f"{name}-posts", f"{name}-engagements"
    own.kafka.dead_letter_topic = f"{name}-dead-letters"
    own.spark.lake = stack.spark.lake / name
    kafka_io.ensure_topics(own.kafka)
    start = parse_timestamp(START)
    stream = Stream(GenConfig(seed=5, start_ms=start, event_rate=3000 / 7200, vocabulary=2000,
                              late_share=0.0, spike_at_s=1800, wall_now_ms=int(time.time() * 1000)))
    produce(stream, own, count=3000)
    archive.run(spark, own)
    first = start // HOUR_MS
    for hour in (first, first + 1):
        jobs.hourly(spark, own, hour, run_id="notebook-test", publish_views=False)
    jobs.daily(spark, own, start // 86_400_000, run_id="notebook-test", publish_views=False)
    return own, stream


def _run(name: str, out: Path, **parameters) -> dict:
    papermill.execute_notebook(
        str(NOTEBOOKS / f"{name}.ipynb"), str(out / f"{name}.ipynb"), parameters=parameters,
        kernel_name="python3", cwd=str(NOTEBOOKS.parent), progress_bar=False,
    )
    return json.loads((out / f"{name}.ipynb").read_text())


def _text(notebook: dict) -> str:
    return "\n".join(
        "".join(o.get("text", "")) + json.dumps(o.get("data", {}).get("text/plain", ""))
        for cell in notebook["cells"] if cell["cell_type"] == "code" for o in cell.get("outputs", [])
    )


def test_explore_trends_finds_the_top_tag(lake, tmp_path):
    own, stream = lake
    top = stream.truth.counts().most_common(1)[0][0]
    out = _text(_run("explore_trends", tmp_path, lake=str(own.spark.lake), master="local[1]"))
    assert f"top tag: {top}" in out


def test_speed_vs_exact_runs(lake, tmp_path):
    own, _ = lake
    out = _text(_run("speed_vs_exact", tmp_path, lake=str(own.spark.lake), master="local[1]"))
    assert "top10_recall" in out


def test_tag_lookup_accepts_any_spelling(lake, tmp_path):
    own, stream = lake
    expected = sum(n for (tag, _, _), n in stream.truth.mentions.items() if tag == "worldcup")
    out = _text(_run("tag_lookup", tmp_path, lake=str(own.spark.lake), master="local[1]", tag="#WORLDCUP"))
    assert f"worldcup {expected} mentions" in out


def test_notebooks_are_stored_without_outputs():
    for path in NOTEBOOKS.glob("*.ipynb"):
        cells = json.loads(path.read_text())["cells"]
        code = [c for c in cells if c["cell_type"] == "code"]
        assert all(not c.get("outputs") and c.get("execution_count") is None for c in code), path
