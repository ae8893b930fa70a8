"""Small lakes filled by the real batch jobs, a second reader (delta-rs) to check them with, and the notebook runner.

The lake tests (test_notebooks on a local lake, test_lake_s3 on S3) each fill one small lake: a generated
stream produced to their own topics, archived, its hours and its day computed, exactly as in production.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import papermill
from deltalake import DeltaTable

from adapters import kafka as kafka_io
from batch import archive, delta, jobs, tables
from batch.tables import Lake
from trendcore.events import parse_timestamp
from trendcore.lake import LakeRoot
from trendcore.settings import Settings
from trendcore.windows import HOUR_MS
from trends.gen.model import GenConfig, Stream
from trends.gen.run import produce

NOTEBOOKS = Path(__file__).parent.parent.parent / "notebooks"

DAY_MS = 86_400_000


def isolated(settings: Settings, name: str, lake: LakeRoot) -> Settings:
    """`settings` with topics of its own (named after `name`) and the lake at `lake`."""
    own = settings.model_copy(deep=True)
    own.kafka.posts_topic, own.kafka.engagements_topic = f"{name}-posts", f"{name}-engagements"
    own.kafka.dead_letter_topic = f"{name}-dead-letters"
    own.spark.lake = lake
    return own


def fill(spark, own: Settings, start: str, posts: int, seed: int = 5, hours: int = 2) -> Stream:
    """Produce `posts` posts over two hours from `start` (no late ones, a spike at 30 min), archive them,
    and run the hourly job for the first `hours` hours and the daily job for the day (which recomputes every
    hour itself); returns the stream (its truth)."""
    kafka_io.ensure_topics(own.kafka)
    start_ms = parse_timestamp(start)
    stream = Stream(GenConfig(seed=seed, start_ms=start_ms, event_rate=posts / 7200, vocabulary=2000,
                              late_share=0.0, spike_at_s=1800, wall_now_ms=int(time.time() * 1000)))
    produce(stream, own, count=posts)
    archive.run(spark, own)
    first = start_ms // HOUR_MS
    for hour in range(first, first + hours):
        jobs.hourly(spark, own, hour, run_id="lake-test", publish_views=False)
    jobs.daily(spark, own, start_ms // DAY_MS, run_id="lake-test", publish_views=False)
    return stream


def row_counts(spark, lake: Lake, storage_options: dict[str, str]) -> dict[str, tuple[int, int]]:
    """(rows Spark reads, rows delta-rs reads) of every table the jobs write, by table name."""
    counts = {}
    for table in tables.ALL_TABLES:
        spark_rows = delta.read(spark, lake, table).count()
        independent = DeltaTable(lake.path(table), storage_options=storage_options)
        counts[table] = (spark_rows, independent.to_pyarrow_table().num_rows)
    return counts


def run_notebook(name: str, out: Path, **parameters) -> dict:
    """Execute notebooks/<name>.ipynb top to bottom (papermill) into `out`; the executed notebook as JSON."""
    papermill.execute_notebook(
        str(NOTEBOOKS / f"{name}.ipynb"), str(out / f"{name}.ipynb"), parameters=parameters,
        kernel_name="python3", cwd=str(NOTEBOOKS.parent), progress_bar=False,
    )
    return json.loads((out / f"{name}.ipynb").read_text())


def outputs(notebook: dict) -> str:
    """Every text a code cell of the executed notebook printed or displayed, one string."""
    return "\n".join(
        "".join(o.get("text", "")) + json.dumps(o.get("data", {}).get("text/plain", ""))
        for cell in notebook["cells"] if cell["cell_type"] == "code" for o in cell.get("outputs", [])
    )
