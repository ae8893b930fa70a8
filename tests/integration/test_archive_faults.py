"""The archive through its faults, on real Kafka, Spark and Delta: its checkpoint deleted, its process killed
between two appends of a micro-batch. Bronze then holds exactly what the docs say (docs/batch.md, "Exactly
once and deduplication"); silver `posts` and `mentions` equal the generator's ground truth.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from adapters import kafka as kafka_io
from batch import archive, delta, tables
from batch.tables import Lake
from tests.integration import lakes
from trendcore.events import parse_timestamp
from trendcore.settings import Settings, to_env
from trendcore.windows import MINUTE_MS
from trends.gen.model import GenConfig, Stream
from trends.gen.run import produce
from trends.gen.truth import GroundTruth

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent.parent
START = "2026-10-06T09:00:00Z"
POSTS = 3000
MORE = 1000
BRONZE = (tables.BRONZE_POSTS, tables.BRONZE_ENGAGEMENTS, tables.QUARANTINE)
TABLES = (*BRONZE, tables.MENTIONS, tables.POSTS)
"""Every table of the archive, in the order a micro-batch appends to them."""


@dataclass
class Lane:
    """One test's own topics and lake, and the truth of every stream it produced to them."""

    settings: Settings
    truths: list[GroundTruth] = field(default_factory=list)

    @property
    def lake(self) -> Lake:
        return Lake.of(self.settings)

    def produce(self, seed: int, posts: int, start: str = START) -> None:
        """`posts` generated posts (with their duplicates, engagements, malformed records); new ids per seed."""
        stream = Stream(GenConfig(seed=seed, start_ms=parse_timestamp(start), event_rate=posts / 3600,
                                  vocabulary=2000, wall_now_ms=int(time.time() * 1000)))
        produce(stream, self.settings, count=posts)
        self.truths.append(stream.truth)

    @property
    def mentions(self) -> Counter:
        """The true mentions per (tag, region, minute) of every stream produced."""
        return sum((t.mentions for t in self.truths), Counter())

    @property
    def posts(self) -> int:
        return sum(t.posts for t in self.truths)

    def bronze(self) -> dict[str, int]:
        """The rows one archiving of everything Kafka holds puts in each bronze table (and quarantine)."""
        return {tables.BRONZE_POSTS: sum(t.posts + t.duplicates for t in self.truths),
                tables.BRONZE_ENGAGEMENTS: sum(t.engagement_count for t in self.truths),
                tables.QUARANTINE: sum(len(t.malformed) for t in self.truths)}

    def kafka_records(self) -> int:
        """Every record the two topics hold."""
        kafka = self.settings.kafka
        return sum(sum(kafka_io.end_offsets(kafka, t).values()) for t in (kafka.posts_topic, kafka.engagements_topic))


def new_lane(settings: Settings, name: str, **batch: int) -> Lane:
    """Topics and a lake named after `name` and the time, with `batch` settings overridden."""
    name = f"{name}-{int(time.time())}"
    own = lakes.isolated(settings, name, settings.spark.lake / name)
    own.batch = own.batch.model_copy(update=batch)
    kafka_io.ensure_topics(own.kafka)
    return Lane(own)


def bronze_rows(spark, lake: Lake) -> dict[str, int]:
    return {table: delta.read(spark, lake, table).count() for table in BRONZE}


def assert_silver_is_the_truth(spark, lane: Lane) -> None:
    """Silver `posts` holds each true post once, `mentions` each true mention once (per tag, region, minute)."""
    posts = delta.read(spark, lane.lake, tables.POSTS)
    assert posts.count() == posts.select("post_id").distinct().count() == lane.posts
    minute = F.floor(F.col("created_at") / MINUTE_MS).alias("minute")
    rows = delta.read(spark, lane.lake, tables.MENTIONS).groupBy("tag", "region", minute).count().collect()
    got = Counter({(r["tag"], r["region"], r["minute"]): r["count"] for r in rows})
    assert got == lane.mentions


def checkpoint_id(lake: Lake) -> str:
    """The query id Structured Streaming keeps in the checkpoint's `metadata` file."""
    return json.loads(Path(lake.checkpoint, "metadata").read_text().splitlines()[0])["id"]


def commits(lake: Lake, table: str) -> list[Path]:
    return sorted(Path(lake.path(table), "_delta_log").glob("*.json"))


def transactions(lake: Lake, table: str) -> list[tuple[str, int]]:
    """The (txnAppId, txnVersion) of every commit of a table that carried one, in commit order."""
    found = []
    for commit in commits(lake, table):
        for line in commit.read_text().splitlines():
            txn = json.loads(line).get("txn")
            if txn:
                found.append((txn["appId"], txn["version"]))
    return found


@pytest.fixture(scope="module")
def archived(stack, spark) -> Lane:
    """A lane whose first stream is archived once."""
    lane = new_lane(stack, "archive-reset")
    lane.produce(seed=0xA1, posts=POSTS)
    sent = sum(lane.bronze().values())
    held = lane.kafka_records()
    read = archive.run(spark, lane.settings).records
    # where records went missing, if any: not delivered, not read, or not written
    assert (held, read, bronze_rows(spark, lane.lake)) == (sent, sent, lane.bronze())
    assert_silver_is_the_truth(spark, lane)
    return lane


def test_a_deleted_checkpoint_archives_the_whole_topic_again_and_silver_counts_each_post_once(archived, spark):
    """A new checkpoint reads both topics from their earliest offsets under a new app id: bronze gets every
    record Kafka holds again (1,000 new posts included), silver only the 1,000 new posts."""
    lane, lake = archived, archived.lake
    before, old_app = bronze_rows(spark, lake), archive.app_id(checkpoint_id(lake))
    shutil.rmtree(lake.checkpoint)
    lane.produce(seed=0xA2, posts=MORE, start="2026-10-06T10:00:00Z")
    result = archive.run(spark, lane.settings)
    assert result.records == lane.kafka_records()
    assert bronze_rows(spark, lake) == {t: before[t] + n for t, n in lane.bronze().items()}
    assert_silver_is_the_truth(spark, lane)
    new_app = archive.app_id(checkpoint_id(lake))
    assert new_app != old_app
    for table in TABLES:
        assert {app for app, _ in transactions(lake, table)} == {old_app, new_app}, table


def test_a_reset_after_a_crash_between_mentions_and_posts_counts_those_mentions_once(archived, spark):
    """The old checkpoint's last batch wrote `mentions` and died before `posts` (here: those posts deleted
    from silver `posts`), then the checkpoint is deleted: the new checkpoint's batch 0 completes `posts` from
    bronze before it merges, so the replay finds those posts known and their mentions count once."""
    lane, lake = archived, archived.lake
    torn = [r["post_id"] for r in delta.read(spark, lake, tables.MENTIONS).select("post_id").distinct().limit(40)
            .collect()]
    DeltaTable.forPath(spark, lake.path(tables.POSTS)).delete(F.col("post_id").isin(torn))
    assert delta.read(spark, lake, tables.POSTS).count() == lane.posts - len(torn)
    before = bronze_rows(spark, lake)
    shutil.rmtree(lake.checkpoint)
    archive.run(spark, lane.settings)
    assert bronze_rows(spark, lake) == {t: before[t] + n for t, n in lane.bronze().items()}
    assert_silver_is_the_truth(spark, lane)


def killed_after_first_append(lane: Lane, log: Path, timeout_s: float = 600) -> dict[str, int]:
    """Run `trends batch archive` in a process of its own and SIGKILL it (the whole process group: Python and
    its JVM) as soon as bronze_posts has its first commit; returns the commits each table had then."""
    env = {**os.environ, **to_env(lane.settings)}
    first = Path(lane.lake.path(tables.BRONZE_POSTS), "_delta_log", f"{0:020d}.json")
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "trends", "batch", "archive"], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    try:
        while not first.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the archive (exit {proc.poll()}) never committed to bronze_posts: "
                            f"{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.005)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    return {table: len(commits(lane.lake, table)) for table in TABLES}


def test_an_archive_killed_between_its_appends_and_run_again_is_exact(stack, spark, tmp_path):
    """SIGKILL after the first micro-batch's bronze_posts commit, then the same checkpoint again: batch 0 is
    replayed with its offsets and app id, so each table skips it if it committed it and appends it if not."""
    lane = new_lane(stack, "archive-kill")
    lane.produce(seed=0xA3, posts=POSTS)
    lane.settings.batch.max_offsets_per_trigger = lane.kafka_records() // 3 + 1  # three micro-batches or so
    at_kill = killed_after_first_append(lane, tmp_path / "archive.log")
    print(f"\ncommits per table when the kill landed: {at_kill}")
    assert at_kill[tables.BRONZE_POSTS] == 1 and at_kill[tables.POSTS] == 0  # inside batch 0, before its last append
    archive.run(spark, lane.settings)
    assert bronze_rows(spark, lane.lake) == lane.bronze()
    assert_silver_is_the_truth(spark, lane)
    app, batches = archive.app_id(checkpoint_id(lane.lake)), len(transactions(lane.lake, tables.BRONZE_POSTS))
    assert batches >= 3
    for table in TABLES:  # one commit per batch id: what the killed run committed was not committed again
        assert transactions(lane.lake, table) == [(app, n) for n in range(batches)], table
