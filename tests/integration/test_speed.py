"""Speed layer guarantees on a real Kafka and Redis, with workers as real subprocesses.

Each test gets its own topics, consumer group and Redis database (a "lane"), so tests never see
each other's records or keys. Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest
from kafka import KafkaConsumer, TopicPartition

from adapters import kafka as kafka_io
from adapters import redis as redis_io
from speed.reference import reference_sketches
from trendcore import keys
from trendcore.cms import CountMinSketch, cell_indexes, error_bound, window_estimate
from trendcore.errors import ServiceError
from trendcore.events import format_time
from trendcore.keys import KeySpace
from trendcore.packing import unpack
from trendcore.settings import Settings
from trendcore.windows import MINUTE_MS, minute_of
from trends.gen.model import GenConfig, Stream
from trends.gen.run import produce

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TRENDS = str(Path(sys.executable).parent / "trends")
_FREE_DBS = list(range(9, 16))  # Redis databases a lane takes and gives back (Redis has 16)
_PORTS = itertools.count(0, 10)


HOLDING_WORKER = "from tests.integration.test_speed import holding_worker; holding_worker()"


def holding_worker() -> None:
    """A worker process (`python -c HOLDING_WORKER <hold ms> run --index i`) that logs `holding_checkpoint` and
    sleeps before submitting each checkpoint (`held_checkpoint_submitted` once submitted): a checkpoint held in
    hand long enough for a test to freeze the process or rebalance the group there. A test hook, patched in
    here: the worker has no such knob."""
    from speed import partition_store
    from speed.cli import app
    from speed.logs import event

    log = logging.getLogger("speed.worker")
    hold_s, submit = int(sys.argv[1]) / 1000, partition_store.PartitionStore.submit

    def held(self, payload):
        event(log, "holding_checkpoint", start=payload.start, next=payload.next_offset)
        time.sleep(hold_s)
        try:
            return submit(self, payload)
        finally:
            event(log, "held_checkpoint_submitted", start=payload.start)

    partition_store.PartitionStore.submit = held
    app(args=sys.argv[2:], prog_name="speed")


def wait_until(check: Callable[[], bool], timeout_s: float, what: str, lane: Lane | None = None) -> None:
    """Poll `check` until true; fail with `what` (and the workers' log tails) after the timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.25)
    logs = lane.log_tails() if lane else ""
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}\n{logs}")


@contextlib.contextmanager
def debug_log(logger: str, path: Path) -> Iterator[None]:
    """Copy `logger`'s debug records to `path` while the block runs (a log tail for failures)."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(threadName)s %(name)s %(message)s"))
    log = logging.getLogger(logger)
    level = log.level
    log.setLevel(logging.DEBUG)
    log.addHandler(handler)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
        handler.close()


@dataclass
class Lane:
    """Isolated topics, group and Redis DB for one test, and the worker processes it started."""

    settings: Settings
    logs: Path
    port_base: int
    procs: dict[int, subprocess.Popen] = field(default_factory=dict)
    extra_env: dict[str, str] = field(default_factory=dict)  # e.g. a cluster lane's Redis mode and key prefix

    @property
    def redis(self):
        return redis_io.client(self.settings.redis)

    def env(self, **extra: str) -> dict[str, str]:
        s = self.settings
        env = {
            "TRENDS_KAFKA__BOOTSTRAP": s.kafka.bootstrap, "TRENDS_KAFKA__POSTS_TOPIC": s.kafka.posts_topic,
            "TRENDS_KAFKA__ENGAGEMENTS_TOPIC": s.kafka.engagements_topic,
            "TRENDS_KAFKA__DEAD_LETTER_TOPIC": s.kafka.dead_letter_topic, "TRENDS_REDIS__URL": s.redis.url,
            "TRENDS_SPEED__GROUP": s.speed.group, "TRENDS_SPEED__METRICS_PORT": str(self.port_base),
            "TRENDS_SPEED__SESSION_TIMEOUT_MS": "6000", "TRENDS_SPEED__HEARTBEAT_MS": "1000", **self.extra_env,
        }
        env.update(extra)
        return {**os.environ, **env}

    def start_worker(self, index: int, hold_ms: int = 0, hook: str | None = None, **extra: str) -> subprocess.Popen:
        """Start `trends speed run --index i` as a real process, logging to the lane's folder; with
        `hold_ms`, a worker that holds each checkpoint that long before submitting it (`holding_worker`); with
        `hook`, `python -c <hook> run --index i`: a worker with a test's patch (the hook passes the arguments on
        to the speed CLI)."""
        log = open(self.logs / f"worker-{index}.log", "ab")
        run = ["run", "--index", str(index)]
        if hold_ms:
            argv = [sys.executable, "-c", HOLDING_WORKER, str(hold_ms), *run]
        else:
            argv = [sys.executable, "-c", hook, *run] if hook else [TRENDS, "speed", *run]
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env(**extra),
                                start_new_session=True, cwd=ROOT)
        self.procs[index] = proc
        return proc

    def metric(self, index: int, name: str, labels: str = "") -> float:
        """A counter's value from a worker's /metrics endpoint (0 when absent or not serving yet)."""
        try:
            url = f"http://127.0.0.1:{self.port_base + index}/metrics"
            body = urllib.request.urlopen(url, timeout=5).read().decode()
        except OSError:
            return 0.0
        wanted = f"{name}{{{labels}}}" if labels else name
        for line in body.splitlines():
            if line.startswith(wanted + " "):
                return float(line.split()[-1])
        return 0.0

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def log_tails(self) -> str:
        return "\n".join(f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:])
                         for p in sorted(self.logs.glob("*.log")))

    def topic_partitions(self) -> list[tuple[str, int]]:
        k = self.settings.kafka
        return [(t, p) for t in (k.posts_topic, k.engagements_topic) for p in range(k.partitions)]

    def end_offsets(self) -> dict[tuple[str, int], int]:
        k = self.settings.kafka
        return {(t, p): o for t in (k.posts_topic, k.engagements_topic) for p, o in kafka_io.end_offsets(k, t).items()}

    def all_applied(self, ends: dict[tuple[str, int], int] | None = None) -> bool:
        """Checkpointed next offsets equal the end offsets of every partition of both input topics."""
        ends = ends or self.end_offsets()
        space = KeySpace.of(self.settings)
        names = [space.part_offset(p, t) for t, p in ends]
        stored = [int(v) if v is not None else 0 for v in redis_io.mget(self.redis, names)]
        return stored == list(ends.values())

    def wait_applied(self, timeout_s: float) -> None:
        """Wait until every produced record is applied (end offsets read once: production is over)."""
        ends = self.end_offsets()
        wait_until(lambda: self.all_applied(ends), timeout_s, "every record applied", self)

    def produce(self, stream: Stream, count: int, rate: float | None = None):
        return produce(stream, self.settings, count=count, rate=rate)

    def send(self, records: list, producer: kafka_io.Producer | None = None) -> None:
        """Send generator records as they are (for streams produced in parts), with `producer` or a new one (a
        new producer costs 0.1-0.6 s: a sender of many small parts passes its own)."""
        k = self.settings.kafka
        topics = {"posts": k.posts_topic, "engagements": k.engagements_topic}
        producer = producer or kafka_io.producer(k)
        for record in records:
            producer.send(topics[record.topic], record.key, record.value)
        producer.flush()

    def dead_letters(self) -> list[dict]:
        """Every record of the lane's dead-letter topic."""
        k = self.settings.kafka
        ends = kafka_io.end_offsets(k, k.dead_letter_topic)
        consumer = kafka_io.consumer(k, consumer_timeout_ms=5000)
        tps = [TopicPartition(k.dead_letter_topic, p) for p in ends]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        out = []
        while sum(consumer.position(tp) for tp in tps) < sum(ends.values()):
            for records in consumer.poll(timeout_ms=1000).values():
                out.extend(orjson.loads(r.value) for r in records)
        consumer.close()
        return out


@pytest.fixture
def lane(stack: Settings, tmp_path: Path) -> Iterator[Lane]:
    yield from _lane(stack, tmp_path)


def _lane(stack: Settings, folder: Path, cluster: Settings | None = None, speed: dict | None = None
          ) -> Iterator[Lane]:
    """A lane on the stack's Redis (a database of its own), or on `cluster`'s Redis Cluster (a key prefix of
    its own: a cluster has one database); `speed`: more speed settings, for the lane's settings and its
    workers' environment."""
    uid = uuid.uuid4().hex[:8]
    db = _FREE_DBS.pop(0) if cluster is None else None
    if cluster is None:
        redis = stack.redis.model_copy(update={"url": stack.redis.url.rsplit("/", 1)[0] + f"/{db}"})
    else:
        redis = cluster.redis.model_copy(update={"key_prefix": f"t{uid}:"})
    settings = stack.model_copy(update={
        "kafka": stack.kafka.model_copy(update={"posts_topic": f"posts-{uid}", "engagements_topic": f"eng-{uid}",
                                                "dead_letter_topic": f"dlq-{uid}"}),
        "redis": redis,
        "speed": stack.speed.model_copy(update={"group": f"speed-{uid}", **(speed or {})}),
    })
    kafka_io.ensure_topics(settings.kafka)
    k = settings.kafka
    # new topics: wait until the broker reports every partition, so no worker joins without metadata
    wait_until(lambda: all(len(kafka_io.end_offsets(k, t)) == k.partitions for t in k.topics), 60, "topic metadata")
    if cluster is None:
        redis_io.client(settings.redis).flushdb()
    extra = {} if cluster is None else {"TRENDS_REDIS__MODE": "cluster", "TRENDS_REDIS__KEY_PREFIX": redis.key_prefix}
    extra.update({f"TRENDS_SPEED__{name.upper()}": str(value) for name, value in (speed or {}).items()})
    lane = Lane(settings, folder, stack.speed.metrics_port + 100 + next(_PORTS), extra_env=extra)
    try:
        yield lane
    finally:
        lane.stop_all()
        if db is not None:
            _FREE_DBS.append(db)


def make_stream(posts_span_s: float, rate: float, seed: int, **overrides) -> Stream:
    """A generator stream whose event times end now (late ones at most 30 min earlier)."""
    now = int(time.time() * 1000)
    options = dict(seed=seed, start_ms=now - int(posts_span_s * 1000), event_rate=rate, wall_now_ms=now,
                   late_max_s=1800, vocabulary=200_000)
    options.update(overrides)
    return Stream(GenConfig(**options))


def assert_cells_match(lane: Lane, stream: Stream) -> int:
    """The merger run, every cms key in Redis equals the reference sketch from ground truth, and vice versa;
    totals too."""
    from speed.materialize import Materializer

    Materializer(lane.settings).write_all()  # the partitions' checkpoints summed into the keys compared
    shape = lane.settings.sketch.shape
    reference = reference_sketches(stream.truth.mentions, shape)
    client, space = lane.redis, KeySpace.of(lane.settings)  # the lane's key prefix, if it has one
    found = {}
    for name in client.scan_iter(match=space.match("cms:*"), count=1000):
        _, region, unit, bucket = name.decode().removeprefix(space.prefix).split(":")
        found[(region, unit, int(bucket))] = CountMinSketch.from_bytes(shape, client.get(name))
    assert set(found) == set(reference), (f"sketch keys differ: only in Redis {set(found) - set(reference)}, "
                                          f"only in truth {set(reference) - set(found)}")
    bad = [c for c, sketch in reference.items() if found[c].counters != sketch.counters]
    assert not bad, f"{len(bad)} of {len(reference)} sketches differ from the reference, e.g. {bad[:3]}"
    for (region, unit, bucket), sketch in reference.items():
        assert int(client.get(space.total(region, unit, bucket))) == sketch.total()
    return len(reference)


# --- shared run: one worker over a mixed stream with poison records, on each Redis topology -----

# the last two: a tombstone (no value) and a value whose dead letter must be cut to fit a record
POISON = [b"\xff\xfe not utf-8", b"[1, 2, 3]", b"", b'{"v": 1, "type": "post"}', b"{" * 50, None, b"\x01" * 900_000]


TOPOLOGIES = ["single", "cluster"]
"""The speed layer's guarantees hold on single-node Redis and on the stack's three-master Redis Cluster."""


def _cluster(request: pytest.FixtureRequest, topology: str) -> Settings | None:
    """The three-master cluster's settings for `topology` "cluster" (started once per module), else None."""
    return request.getfixturevalue("redis_cluster_settings") if topology == "cluster" else None


@pytest.fixture(scope="module", params=TOPOLOGIES)
def partition_run(request, stack: Settings, tmp_path_factory) -> Iterator[tuple[Lane, Stream, int]]:
    """30,000 posts (duplicates, late, malformed, engagements) plus hand-made poison, one worker, on each Redis
    topology."""
    folder = tmp_path_factory.mktemp(f"mixed-{request.param}")
    yield from _mixed_run(_lane(stack, folder, cluster=_cluster(request, request.param)))


def _mixed_run(gen: Iterator[Lane]) -> Iterator[tuple[Lane, Stream, int]]:
    lane = next(gen)
    try:
        stream = make_stream(30, 1000, seed=11, malformed_share=0.01, duplicate_share=0.02, late_share=0.05,
                             engagements_per_post=1.0)
        lane.start_worker(0)
        lane.produce(stream, 30_000)
        producer = kafka_io.producer(lane.settings.kafka)
        k = lane.settings.kafka
        wrong_type = orjson.dumps({"v": 1, "type": "post", "post_id": "x", "user_id": "u", "region": "US",
                                   "text": "#oops", "created_at": format_time(int(time.time() * 1000))})
        for i, value in enumerate(POISON):
            producer.send(k.posts_topic, f"poison-{i}".encode(), value)
        producer.send(k.engagements_topic, b"poison-eng", wrong_type)
        producer.flush()
        injected = len(stream.truth.malformed) + len(POISON) + 1
        lane.wait_applied(120)
        yield lane, stream, injected
    finally:
        gen.close()


def test_partition_state_every_merged_cell_equals_reference(partition_run):
    """The merger's cms:* and total:* equal the reference, cell for cell."""
    lane, stream, _ = partition_run
    compared = assert_cells_match(lane, stream)
    assert compared >= 4 * 2
    space, client = KeySpace.of(lane.settings), lane.redis
    assert not list(client.scan_iter(match=space.match("post:*"), count=1000))
    if lane.settings.redis.mode == "cluster":  # each checkpoint is one slot; they went to several masters
        masters = {client.get_node_from_key(space.part_offset(p, lane.settings.kafka.posts_topic)).name
                   for p in range(lane.settings.kafka.partitions)}
        assert len(masters) > 1
    wait_until(lambda: lane.metric(0, "speed_duplicate_posts_total") == stream.truth.duplicates, 10,
               f"{stream.truth.duplicates} duplicates counted", lane)


@pytest.fixture(scope="module")
def redis_cluster_settings(stack: Settings) -> Iterator[Settings]:
    """The stack's three-master Redis Cluster (tests/integration/test_redis_topology.py), started for this
    module and stopped after it."""
    from tests.integration.test_redis_topology import on_cluster
    from trends.stack import manager, procs, redis_cluster

    own = on_cluster(stack)
    names = redis_cluster.names(own)
    if all(procs.state(manager.components(own)[n].service(own)) == "stopped" for n in names):
        shutil.rmtree(own.stack.home / "redis-cluster", ignore_errors=True)
    manager.up(own, names=names, log=lambda _m: None)
    try:
        yield own
    finally:
        manager.down(own, names=names, log=lambda _m: None)


def test_partition_state_dead_letters_accuracy_and_top_10(partition_run):
    from serving.queries import window_count
    from speed.materialize import Materializer

    lane, stream, injected = partition_run
    letters = lane.dead_letters()
    assert len(letters) == injected  # each poison record once: none dead-lettered twice
    assert len({(d["topic"], d["partition"], d["offset"]) for d in letters}) == injected
    assert all(d["reason"] and d["topic"] in (lane.settings.kafka.posts_topic, lane.settings.kafka.engagements_topic)
               for d in letters)
    assert any("value_b64" in d for d in letters)  # the non-UTF-8 record is kept, base64
    assert any(d.get("tombstone") and d["value"] is None for d in letters)
    assert any(d.get("truncated") and d["value_bytes"] == 900_000 for d in letters)
    assert lane.procs[0].poll() is None, "the worker died"
    assert lane.metric(0, "speed_dead_letters_total", f'topic="{lane.settings.kafka.posts_topic}"') == injected - 1
    assert_accurate(lane, stream)
    now, space = int(time.time() * 1000), KeySpace.of(lane.settings)
    Materializer(lane.settings).write_all(now)
    top = orjson.loads(lane.redis.get(space.trending("all", "1h", "volume")))["entries"][0]
    answer = window_count(lane.redis, space, lane.settings, top["tag"], "all", "1h", now)
    # the API counts authors from the merger's sketches, as the snapshot does
    assert answer["authors"] == top["authors"] >= lane.settings.speed.min_authors
    assert answer["count"] == top["count"]


def assert_accurate(lane: Lane, stream: Stream) -> None:
    """Every estimate at or above the truth, within eps * N at rate 1 - delta; the 1h top 10 where clear."""
    from speed.materialize import Materializer

    settings, truth = lane.settings, stream.truth
    shape, eps, delta = settings.sketch.shape, settings.sketch.eps, settings.sketch.delta
    client, keys = lane.redis, KeySpace.of(settings)  # the lane's key prefix, if it has one
    minutes = range(minute_of(truth.first_ms), minute_of(truth.last_ms) + 1)
    now = int(time.time() * 1000)
    Materializer(settings).write_all(now)
    regions = sorted({r for _, r, _ in truth.mentions}) + ["all"]
    queries = within = 0
    for region in regions:
        sketches = [CountMinSketch.from_bytes(shape, client.get(keys.cms(region, "m", m))) for m in minutes]
        n = sum(int(client.get(keys.total(region, "m", m)) or 0) for m in minutes)
        exact = truth.counts(region, minutes)
        for tag, true in exact.items():
            cells = cell_indexes(tag, shape)  # window_estimate, hashing once: the same sum of minima
            estimate = sum(min(s.counters[c] for c in cells) for s in sketches)
            assert estimate >= true, f"{region} {tag}: estimate {estimate} below the truth {true}"
            queries += 1
            within += estimate <= true + error_bound(eps, n)
        doc = orjson.loads(client.get(keys.trending(region, "1h", "volume")))
        hour_counts = truth.counts(region, range(minute_of(now) - 59, minute_of(now) + 1)).most_common(11)
        got = [e["tag"] for e in doc["entries"][:10]]
        gap = 2 * eps * doc["total"]
        counts = [c for _, c in hour_counts]
        for i in range(10):
            clear_above = i == 0 or counts[i - 1] - counts[i] > gap
            clear_below = counts[i] - counts[i + 1] > gap
            if clear_above and clear_below:
                assert got[i] == hour_counts[i][0], f"{region} rank {i + 1}: {got[i]} != {hour_counts[i][0]}"
        assert all(e["count"] >= dict(hour_counts).get(e["tag"], 0) for e in doc["entries"][:10])
        top = doc["entries"][0]["tag"]
        assert doc["entries"][0]["count"] == window_estimate(sketches, top)  # the snapshot uses the same estimate
    assert within / queries >= 1 - delta, f"{queries - within} of {queries} estimates beyond eps * N"


def _produce_in_background(lane: Lane, stream: Stream, count: int, rate: float | None) -> threading.Thread:
    thread = threading.Thread(target=lane.produce, args=(stream, count, rate), daemon=True)
    thread.start()
    return thread


@pytest.fixture(params=TOPOLOGIES)
def partition_lane(request, stack: Settings, tmp_path: Path) -> Iterator[Lane]:
    """A lane on each Redis topology: the stack's single Redis and its three-master cluster."""
    yield from _lane(stack, tmp_path, cluster=_cluster(request, request.param))


def test_partition_state_kill_9_three_times_with_three_workers_is_exactly_once(partition_lane):
    """Three workers over 200,000 posts, each killed with SIGKILL once and restarted: a killed worker's partitions
    resume from their last checkpoint elsewhere, and every record counts once."""
    lane = partition_lane
    stream = make_stream(200, 1000, seed=21, engagements_per_post=0.1, duplicate_share=0.005,
                         malformed_share=0.0, late_share=0.01)
    for i in range(3):
        lane.start_worker(i)
    producer = _produce_in_background(lane, stream, 200_000, rate=8000)
    kills = 0
    for victim in (0, 1, 2):
        time.sleep(6)
        lane.procs[victim].send_signal(signal.SIGKILL)
        lane.procs[victim].wait(timeout=10)
        kills += 1
        time.sleep(1)
        lane.start_worker(victim)
    producer.join(timeout=240)
    assert not producer.is_alive(), "the producer did not finish"
    assert kills == 3 and stream.truth.posts == 200_000
    lane.wait_applied(240)
    assert_cells_match(lane, stream)


def test_partition_state_zombie_checkpoint_is_refused(partition_lane):
    """A worker stopped past its session with records in memory: after waking, either its checkpoint is
    refused (it wrote before noticing) or kafka-python reports its partitions lost and it drops them
    unwritten; either way no cell counts its records twice."""
    lane = partition_lane
    stream = make_stream(40, 1000, seed=33, engagements_per_post=0.2, malformed_share=0.0)
    extra = {"TRENDS_SPEED__FLUSH_EVERY_S": "3"}
    zombie = lane.start_worker(0, **extra)
    log = lane.logs / "worker-0.log"
    wait_until(lambda: log.read_text(errors="replace").count('"seeked"') >= 1, 60, "the first worker positioned", lane)
    lane.start_worker(1, **extra)
    # both positioned after the second joined (a join kafka-python loses costs a StallWatch period, 30 s)
    wait_until(lambda: _settled(lane, 0) and _settled(lane, 1), 90, "both workers owning partitions", lane)
    producer = _produce_in_background(lane, stream, 40_000, rate=4000)
    time.sleep(3)
    zombie.send_signal(signal.SIGSTOP)  # records in memory, up to 3 s of them not checkpointed
    producer.join(timeout=120)
    assert not producer.is_alive()
    lane.wait_applied(180)  # worker 1 took every partition over and applied everything
    zombie.send_signal(signal.SIGCONT)
    wait_until(lambda: any(e in log.read_text(errors="replace") for e in ("stale_checkpoint_refused",
                                                                          '"partitions_lost"')),
               30, "the zombie's checkpoint refused or its partitions dropped", lane)
    lane.wait_applied(60)
    assert_cells_match(lane, stream)


def test_partition_state_redis_restart_with_data_loss_rebuilds_windows(lane, stack):
    """Half a stream applied, Redis restarted empty, the other half sent: the workers' memory outlives Redis's
    data; they drop it and replay Kafka, and every record counts once. (On the cluster:
    test_a_cluster_master_killed_and_restarted_empty_rebuilds_only_its_partitions.)"""
    from trends.stack import procs
    from trends.stack import redis as redis_stack

    stream = make_stream(30, 1000, seed=41, engagements_per_post=0.2, malformed_share=0.002)
    lane.start_worker(0)
    lane.start_worker(1)
    records = list(stream.records(30_000))
    half = len(records) // 2
    lane.send(records[:half])
    lane.wait_applied(120)
    epoch_key = KeySpace.of(lane.settings).epoch(lane.settings.speed.group)
    before = lane.redis.get(epoch_key)
    assert procs.stop(redis_stack.service(stack))
    redis_stack.start(stack)  # no persistence: every key is gone, the checkpoints included
    wait_until(lambda: lane.redis.get(epoch_key) not in (None, before), 30, "a new epoch after the loss", lane)
    lane.send(records[half:])
    lane.wait_applied(180)
    assert_cells_match(lane, stream)
    assert lane.metric(0, "speed_rebuilds_total") + lane.metric(1, "speed_rebuilds_total") >= 1


def _settled(lane: Lane, index: int) -> bool:
    """Worker `index`'s last rebalance event is an assignment of partitions, and it seeked them since."""
    log = lane.logs / f"worker-{index}.log"
    if not log.exists():
        return False
    last = None
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{") and any(f'"{e}"' in line for e in ("partitions_assigned", "partitions_revoked",
                                                                   "partitions_lost", "seeked")):
            last = (orjson.loads(line), last)
    if last is None or last[0]["event"] != "seeked" or last[1] is None:
        return False
    assigned = last[1][0]
    return assigned["event"] == "partitions_assigned" and bool(assigned["partitions"])


def _events(lane: Lane, index: int, name: str, after_ts: int = 0) -> list[dict]:
    """Worker `index`'s log events called `name`, logged at or after `after_ts` (epoch ms)."""
    found = []
    for line in (lane.logs / f"worker-{index}.log").read_text(errors="replace").splitlines():
        if f'"{name}"' in line and line.startswith("{"):
            doc = orjson.loads(line)
            if doc.get("event") == name and doc["ts"] >= after_ts:
                found.append(doc)
    return found


def _send_slowly(lane: Lane, records: list, per_second: int) -> threading.Thread:
    """Send `records` in the background, about `per_second` a second (one producer: a new one per part would
    cost more than the part's quarter second)."""
    def run() -> None:
        producer = kafka_io.producer(lane.settings.kafka)
        try:
            for i in range(0, len(records), per_second // 4):
                lane.send(records[i:i + per_second // 4], producer)
                time.sleep(0.25)
        finally:
            producer.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_cluster_master_killed_and_restarted_empty_rebuilds_only_its_partitions(stack, redis_cluster_settings,
                                                                                  tmp_path):
    """One of the three masters SIGKILLed mid-stream and restarted empty (no persistence; it rejoins with its
    slots from its nodes.conf): only the partitions whose slot it serves come back without a checkpoint and
    replay Kafka, the others resume from theirs, and every merged cell equals the reference."""
    from trends.stack import procs, redis_cluster

    cluster = redis_cluster_settings
    gen = _lane(stack, tmp_path, cluster=cluster)
    lane = next(gen)
    try:
        stream = make_stream(30, 1000, seed=73, engagements_per_post=0.2, malformed_share=0.0)
        records = list(stream.records(30_000))
        third = len(records) // 3
        lane.start_worker(0)
        lane.start_worker(1)
        lane.send(records[:third])
        lane.wait_applied(120)
        space, client, k = KeySpace.of(lane.settings), lane.redis, lane.settings.kafka
        port_of = {p: client.get_node_from_key(space.part_offset(p, k.posts_topic)).port for p in range(k.partitions)}
        victim = port_of[0]
        lost = {p for p, port in port_of.items() if port == victim}
        assert len(lost) < k.partitions, "every partition on one master: nothing to tell apart"
        sender = _send_slowly(lane, records[third:], 4000)
        time.sleep(2)
        killed_at = int(time.time() * 1000)
        index = redis_cluster.ports(cluster).index(victim) + 1
        node = redis_cluster.service(cluster, index)
        os.kill(procs.read_pid(node), signal.SIGKILL)
        wait_until(lambda: not procs.port_open(node.host, node.port), 10, "the master gone")
        time.sleep(1)
        redis_cluster.start(cluster, index)  # empty: no persistence; nodes.conf keeps its slots
        sender.join(timeout=120)
        assert not sender.is_alive()
        lane.wait_applied(180)
        assert_cells_match(lane, stream)
        fresh = {name for i in (0, 1) for e in _events(lane, i, "seeked", killed_at) for name in e["fresh"]}
        topics = (k.posts_topic, k.engagements_topic)
        rebuilt = {int(name.rsplit(":", 1)[1]) for name in fresh if name.rsplit(":", 1)[0] in topics}
        assert rebuilt == lost, f"partitions loaded without a checkpoint {sorted(rebuilt)}, lost {sorted(lost)}"
    finally:
        gen.close()


def test_a_rebalance_while_a_checkpoint_is_in_flight_counts_every_record_once(partition_lane):
    """Worker 0 holds each checkpoint 1.5 s before submitting it, so a checkpoint is in flight nearly all the
    time; a second worker joins, and later leaves. kafka-python calls the rebalance listener inside `poll()`,
    so the group's rebalance waits for the step in hand: no revocation falls between a held checkpoint and its
    submission, the revocation's own checkpoint follows it, the new owner loads what both wrote, and every
    merged cell equals the reference."""
    lane = partition_lane
    stream = make_stream(30, 1000, seed=79, engagements_per_post=0.2, malformed_share=0.0)
    records = list(stream.records(30_000))
    lane.start_worker(0, hold_ms=1500)
    sender = _send_slowly(lane, records, 2000)
    log = lane.logs / "worker-0.log"

    def held() -> int:
        return log.read_text(errors="replace").count('"holding_checkpoint"')

    wait_until(lambda: held() >= 2, 60, "worker 0 holding a checkpoint", lane)
    joined_at = int(time.time() * 1000)
    lane.start_worker(1)
    wait_until(lambda: _events(lane, 0, "partitions_revoked", joined_at), 60, "worker 0's partitions revoked", lane)
    wait_until(lambda: _events(lane, 1, "seeked"), 60, "worker 1 positioned", lane)
    time.sleep(3)
    left_at = int(time.time() * 1000)
    lane.procs[1].send_signal(signal.SIGTERM)  # leaves: its partitions go back to worker 0 mid-hold
    lane.procs[1].wait(timeout=60)
    # worker 0 may still be holding checkpoints (1.5 s each: every partition with lists to pack is checkpointed)
    # when worker 1's last checkpoints have made every record applied: wait for it to take the partitions back
    wait_until(lambda: _events(lane, 0, "seeked", left_at), 90, "worker 0 positioned after worker 1 left", lane)
    sender.join(timeout=120)
    assert not sender.is_alive()
    lane.wait_applied(180)
    assert_cells_match(lane, stream)
    revoked = [r["ts"] for r in _events(lane, 0, "partitions_revoked", joined_at)]
    holds = [h["ts"] for h in _events(lane, 0, "holding_checkpoint", joined_at)]
    submitted = [s["ts"] for s in _events(lane, 0, "held_checkpoint_submitted", joined_at)]
    in_flight = list(zip(holds, submitted, strict=False))
    assert len(revoked) >= 2 and in_flight
    assert not [r for r in revoked for held, done in in_flight if held < r < done], "a revocation cut a checkpoint"
    # the join met a checkpoint in hand (records still arriving) and went on right after it was submitted
    assert any(0 <= revoked[0] - done <= 500 for done in submitted), (revoked, submitted)
    lane.procs[0].kill()  # done: a stop would hold each of its last checkpoints 1.5 s too (14-19 s in all)


def test_partition_state_says_rebuilding_while_it_replays_after_a_data_loss(stack, tmp_path):
    """Redis loses its data: while the worker replays Kafka the merger's summary, the snapshots and the count
    answers say `rebuilding` with progress in [0, 1); once it caught up the flag is gone. Small polls and
    frequent checkpoints make the replay last a few checkpoints; the worker is paused while a marker is seen, so
    the snapshot and the answer are written during the replay whatever the machine's speed."""
    from serving.queries import window_count
    from speed.materialize import Materializer
    from trends.stack import procs
    from trends.stack import redis as redis_stack

    gen = _lane(stack, tmp_path, speed={"max_batch_records": 200, "flush_every_s": 0.2})
    lane = next(gen)
    try:
        space, settings = KeySpace.of(lane.settings), lane.settings
        stream = make_stream(30, 1000, seed=73, engagements_per_post=0.2, malformed_share=0.0)
        worker = lane.start_worker(0)
        lane.send(list(stream.records(30_000)))
        lane.wait_applied(180)
        materializer = Materializer(settings)
        materializer.write_all()
        assert materializer.merger.rebuilding is None and lane.redis.get(space.rebuilding) is None  # caught up
        epoch_key = space.epoch(settings.speed.group)
        before = lane.redis.get(epoch_key)
        assert procs.stop(redis_stack.service(stack))
        redis_stack.start(stack)  # no persistence: every key is gone, the checkpoints included
        seen = []
        deadline = time.monotonic() + 120
        while not seen and time.monotonic() < deadline:  # the merger's read, as often as it can
            with contextlib.suppress(ServiceError):  # Redis still starting
                found = materializer.merger.record_rebuilding()
                if found is not None:
                    worker.send_signal(signal.SIGSTOP)  # the replay holds still while the answers are written
                    seen.append(found)
            time.sleep(0.01)
        assert seen, f"no rebuilding flag seen while the worker replayed\n{lane.log_tails()}"
        try:
            assert 0.0 <= seen[0].progress < 1.0 and seen[0].partitions
            assert all(p.reached_offset < p.target_offset for p in seen[0].partitions)
            materializer.write_all()
            doc = orjson.loads(lane.redis.get(space.trending("all", "1h", "volume")))
            assert doc["rebuilding"] is not None and 0.0 <= doc["rebuilding"]["progress"] < 1.0, doc["rebuilding"]
            answer = window_count(lane.redis, space, settings, "anything", "all", "1h", int(time.time() * 1000))
            assert answer["rebuilding"] == doc["rebuilding"]
        finally:
            worker.send_signal(signal.SIGCONT)
        assert lane.redis.get(epoch_key) not in (None, before)
        lane.wait_applied(180)
        wait_until(lambda: materializer.merger.record_rebuilding() is None, 30, "the flag gone after the replay",
                   lane)
        materializer.write_all()
        doc = orjson.loads(lane.redis.get(space.trending("all", "1h", "volume")))
        assert doc["rebuilding"] is None and lane.redis.get(space.rebuilding) is None
        answer = window_count(lane.redis, space, settings, "anything", "all", "1h", int(time.time() * 1000))
        assert answer["rebuilding"] is None
    finally:
        gen.close()


def own_redis(stack: Settings, folder: Path) -> Settings:
    """The stack's settings pointed at a Redis of the test's own (port base + 98, data under `folder`), not started:
    a test stops and starts it without touching the session's Redis."""
    url = f"redis://127.0.0.1:{stack.speed.metrics_port + 90}/0"
    return stack.model_copy(update={"redis": stack.redis.model_copy(update={"url": url}),
                                    "stack": stack.stack.model_copy(update={"home": folder / "own-redis",
                                                                            "redis_tls_port": None})})  # taken


def test_redis_down_at_assignment_pauses_partitions_instead_of_crashing(lane, stack, tmp_path):
    """The rebalance listener cannot reach Redis: the worker pauses its partitions, keeps running,
    and catches up exactly once when Redis comes up (kafka-python re-raises listener errors)."""
    from trends.stack import procs
    from trends.stack import redis as redis_stack

    later = own_redis(stack, tmp_path)  # nothing listens there yet
    lane.settings = lane.settings.model_copy(update={"redis": later.redis})
    stream = make_stream(10, 1000, seed=51, engagements_per_post=0.2)
    worker = lane.start_worker(0, TRENDS_REDIS__RETRIES="0")
    lane.produce(stream, 10_000)
    log = lane.logs / "worker-0.log"
    wait_until(lambda: '"seek_deferred"' in log.read_text(errors="replace"), 60, "a deferred seek", lane)
    assert worker.poll() is None, "the worker stopped instead of waiting for Redis"
    redis_stack.start(later)
    try:
        lane.wait_applied(120)
        assert_cells_match(lane, stream)
        assert worker.poll() is None
    finally:
        lane.stop_all()
        procs.stop(redis_stack.service(later))


def _consumed(lane: Lane, index: int) -> float:
    """Records worker `index` took from both input topics (`speed_records_consumed_total`)."""
    k = lane.settings.kafka
    return sum(lane.metric(index, "speed_records_consumed_total", f'topic="{t}"')
               for t in (k.posts_topic, k.engagements_topic))


def test_recovery_while_redis_is_down_pauses_every_partition(lane, stack, tmp_path):
    """Redis goes down mid-stream (saved, to come back with its data): the failed checkpoint makes the worker
    re-read its partitions from Redis, and while Redis stays down every partition waits paused and takes no
    record, though the log holds more: the consumer's positions are past records never checkpointed. Redis
    back, the worker resumes from its checkpoints (no rebuild) and every record counts once."""
    from trends.stack import procs
    from trends.stack import redis as redis_stack

    own = own_redis(stack, tmp_path)
    lane.settings = lane.settings.model_copy(update={"redis": own.redis})
    redis_stack.start(own)
    try:
        stream = make_stream(30, 1000, seed=83, engagements_per_post=0.2, malformed_share=0.0)
        records = list(stream.records(20_000))
        third = len(records) // 3
        worker = lane.start_worker(0, TRENDS_REDIS__RETRIES="0")
        lane.send(records[:third])
        lane.wait_applied(120)
        sender = _send_slowly(lane, records[third:], 2000)
        time.sleep(1)
        down_at = int(time.time() * 1000)
        redis_io.client(own.redis.model_copy(update={"retries": 0})).shutdown(save=True)  # the checkpoints kept
        svc = redis_stack.service(own)
        wait_until(lambda: not procs.port_open(svc.host, svc.port), 10, "Redis gone")
        every = {f"{t}:{p}" for t, p in lane.topic_partitions()}

        def all_paused() -> list[dict]:
            return [e for e in _events(lane, 0, "seek_deferred", down_at) if set(e["partitions"]) == every]

        wait_until(lambda: all_paused(), 60, "every partition paused", lane)
        taken, paused = _consumed(lane, 0), len(all_paused())
        assert taken >= third, f"the worker's metrics show {taken} records taken"
        sender.join(timeout=60)
        assert not sender.is_alive()
        wait_until(lambda: len(all_paused()) >= paused + 3, 30, "three more positionings deferred", lane)
        assert _consumed(lane, 0) == taken, "a partition took records while Redis was down"
        assert sum(lane.end_offsets().values()) > taken, "nothing left to take: the pause was not tested"
        assert worker.poll() is None, "the worker stopped instead of waiting for Redis"
        redis_stack.start(own)  # loads the dump
        lane.wait_applied(120)
        assert_cells_match(lane, stream)
        assert worker.poll() is None and lane.metric(0, "speed_rebuilds_total") == 0
    finally:
        lane.stop_all()
        procs.stop(redis_stack.service(own))


def blocking_member(lane: Lane, attempts: int = 3, per_attempt_s: float = 20.0) -> KafkaConsumer:
    """A member of the workers' group that has its assignment and will not poll again: kafka-python's
    IO thread keeps it alive with heartbeats, so it holds the next rebalance. A test tool, not the
    subject: a join that kafka-python 3.0.12 loses (see `_unstick_rebalance`) is retried with a new
    consumer."""
    k = lane.settings.kafka
    for _ in range(attempts):
        blocker = kafka_io.consumer(k, k.posts_topic, k.engagements_topic, group_id=lane.settings.speed.group,
                                    enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=1000)
        deadline = time.monotonic() + per_attempt_s
        while time.monotonic() < deadline:
            blocker.poll(timeout_ms=1000)
            if blocker.assignment():
                return blocker
        blocker.close(autocommit=False)
    pytest.fail(f"a blocking member never got an assignment in {attempts} attempts\n{lane.log_tails()}")


def test_a_rebalance_that_never_assigns_is_rejoined_and_nothing_is_lost(lane):
    """A group member that joins and then stops polling holds the next rebalance: the workers are
    revoked and not assigned again. After their stall timeout (30 s) they rejoin and keep running;
    once the member leaves, they take its partitions and apply everything exactly once."""
    stream = make_stream(10, 1000, seed=61, engagements_per_post=0.2)
    lane.start_worker(0)
    lane.produce(stream, 10_000)
    worker_log = lane.logs / "worker-0.log"
    wait_until(lambda: '"partitions_assigned"' in worker_log.read_text(errors="replace"), 60,
               "worker 0's assignment", lane)
    with debug_log("kafka", lane.logs / "blocker.log"):  # explains a failed join, should one happen
        blocker = blocking_member(lane)
        try:
            lane.start_worker(1)  # a rebalance the blocker never joins: it does not poll any more
            wait_until(lambda: lane.metric(0, "speed_stalled_rebalances_total") >= 1, 90, "worker 0 to rejoin", lane)
            assert all(proc.poll() is None for proc in lane.procs.values())
        finally:
            blocker.close(autocommit=False)
    try:
        lane.wait_applied(120)
        assert_cells_match(lane, stream)
        assert '"rebalance_stalled"' in worker_log.read_text(errors="replace")
    finally:
        lane.stop_all()


def test_late_events_count_in_their_bucket_while_kept_else_in_the_metric(partition_lane):
    from speed.materialize import Materializer

    lane = partition_lane
    now = int(time.time() * 1000)
    k = lane.settings.kafka
    lane.start_worker(0, TRENDS_SPEED__KEEP_MINUTES="60")
    cases = {"fresh": 0, "tenmin": 10 * MINUTE_MS, "ninetymin": 90 * MINUTE_MS, "twodays": 2 * 86_400_000}
    producer = kafka_io.producer(k)
    for name, ago in cases.items():
        for n in range(3):
            value = orjson.dumps({"v": 1, "type": "post", "post_id": f"late-{name}-{n}", "user_id": f"u{n}",
                                  "region": "FR", "text": f"so #late{name} now", "created_at": format_time(now - ago)})
            producer.send(k.posts_topic, f"late-{name}-{n}".encode(), value)
    producer.flush()
    lane.wait_applied(60)
    Materializer(lane.settings).write_all()  # the merger writes the keys read below
    shape, space = lane.settings.sketch.shape, KeySpace.of(lane.settings)
    client = lane.redis

    def minute_count(name: str, ago: int) -> int:
        raw = client.get(space.cms("FR", "m", minute_of(now - ago)))
        return CountMinSketch.from_bytes(shape, raw).estimate(f"late{name}")

    def hour_count(name: str, ago: int) -> int:
        raw = client.get(space.cms("FR", "h", (now - ago) // (60 * MINUTE_MS)))
        return CountMinSketch.from_bytes(shape, raw).estimate(f"late{name}")

    assert minute_count("fresh", 0) == 3
    assert minute_count("tenmin", cases["tenmin"]) == 3          # late, in its own minute
    assert minute_count("ninetymin", cases["ninetymin"]) == 0    # minute no longer kept ...
    assert hour_count("ninetymin", cases["ninetymin"]) == 3      # ... its hour still is
    assert hour_count("twodays", cases["twodays"]) == 0

    # counted when the worker took the records, read from its /metrics endpoint
    def late(kind: str) -> float:
        return lane.metric(0, "speed_late_mentions_total", f'kind="{kind}"')

    wait_until(lambda: late("minute") >= 3 and late("dropped") >= 3, 10, "3 late and 3 dropped mentions", lane)
    assert (late("minute"), late("dropped")) == (3, 3)


def test_partition_state_an_offset_the_log_no_longer_holds_is_a_gap_or_a_rewind(partition_lane):
    """Records deleted before they were taken are counted as skipped and the partition goes on after them; a
    stored offset past the log's end (a recreated topic) starts over at the log start (counted as outside the
    log). Every stored offset reaches its log end."""
    from kafka.admin import KafkaAdminClient

    lane = partition_lane
    lane.send(list(make_stream(5, 1000, seed=61, malformed_share=0.0).records(2_000)))
    ends = lane.end_offsets()
    posts = lane.settings.kafka.posts_topic
    (gone, gone_end), (ahead, ahead_end) = sorted(((p, e) for (t, p), e in ends.items() if t == posts),
                                                  key=lambda pe: -pe[1])[:2]
    assert gone_end >= 20
    admin = KafkaAdminClient(bootstrap_servers=lane.settings.kafka.bootstrap.split(","))
    try:
        admin.delete_records({TopicPartition(posts, gone): 15})
    finally:
        admin.close()
    space = KeySpace.of(lane.settings)
    for partition, offset in ((gone, 5), (ahead, ahead_end + 100)):  # two slots on a cluster: two SETs
        lane.redis.set(space.part_offset(partition, posts), offset)
    lane.start_worker(0)
    lane.wait_applied(60)
    assert lane.metric(0, "speed_records_skipped_total", f'topic="{posts}"') == 10  # offsets 5 to 14
    # the exposition lists the labels sorted by name
    assert lane.metric(0, "speed_offsets_outside_log_total", f'partition="{ahead}",topic="{posts}"') == 1
    assert lane.metric(0, "speed_offsets_outside_log_total", f'partition="{gone}",topic="{posts}"') == 0


def test_a_24h_baseline_published_for_some_hours_counts_the_rest_at_their_average(lane):
    """The batch layer may have published hour-of-week baselines for only part of the window:
    summing those alone would make the usual level too low and the rise too high."""
    from speed.materialize import Materializer
    from trendcore.windows import hour_of_week

    now = int(time.time() * 1000)
    materializer = Materializer(lane.settings)
    window = materializer.read_window("US", "24h", now)
    published = window.buckets[::2]
    for hour in published:
        lane.redis.hset(keys.baseline("US", hour_of_week(hour)), mapping={"x": 2.0, "y": 1.0})
    assert len(published) < len(window.buckets)
    assert materializer.baselines(window, ["x", "y", "z"], now) == pytest.approx(
        {"x": 2.0 * len(window.buckets), "y": 1.0 * len(window.buckets), "z": 0.0})


# --- post lists, display spellings, engagement scores, ?wait=true ---------------------------------------------

def _with_event_ids(records: list, copies_every: int) -> tuple[list, list]:
    """The stream's engagement records, each given an event id, and copies (same event id) of every
    `copies_every`-th: what a retrying client sends."""
    named, copies = [], []
    for i, record in enumerate(r for r in records if r.topic == "engagements"):
        doc = {**orjson.loads(record.value), "event_id": f"e{i}"}
        one = type(record)(record.topic, record.key, orjson.dumps(doc), record.kind)
        named.append(one)
        if i % copies_every == 0:
            copies.append(one)
    return named, copies


def _post_reference(records: list, weights: dict[str, float]) -> tuple[dict, dict, dict[str, float]]:
    """From the records sent: per (tag, hour) the posts (created ms, post id, text), the spellings seen per tag, and
    the summed engagement weight per post id (each event id once)."""
    from trendcore.events import parse_timestamp
    from trendcore.hashtags import tag_keys
    from trendcore.windows import HOUR_MS

    by_tag: dict[tuple[str, int], list] = {}
    spellings: dict[str, set[str]] = {}
    for record in records:
        if record.topic != "posts":
            continue
        doc = orjson.loads(record.value)
        created = parse_timestamp(doc["created_at"])
        for tag, spelling in tag_keys(doc["text"]):
            by_tag.setdefault((tag, created // HOUR_MS), []).append((created, doc["post_id"], doc["text"]))
            spellings.setdefault(tag, set()).add(spelling)
    score: dict[str, float] = {}
    seen: set[str] = set()
    for record in records:
        if record.topic == "engagements":
            doc = orjson.loads(record.value)
            if doc.get("event_id") is not None:
                if doc["event_id"] in seen:
                    continue
                seen.add(doc["event_id"])
            score[doc["post_id"]] = score.get(doc["post_id"], 0.0) + weights[doc["kind"]]
    return by_tag, spellings, score


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_partition_state_post_lists_display_and_engagement_scores_match_the_reference(request, topology, stack,
                                                                                      tmp_path):
    """Every tag a candidate and lists never trimmed: the merged newest lists hold every
    post of their tag and hour with its body, the merged top lists every engaged post with its summed weight
    (event-id copies, within a step and steps later, counted once), display spellings are spellings of the
    tag, no `post:*` key exists, and the API's posts answer ranks them as the reference does."""
    from serving.queries import posts as posts_answer
    from speed.materialize import Materializer
    from trendcore.post_lists import decode_posts, decode_top_posts

    gen = _lane(stack, tmp_path, speed={"posts_per_tag": 5000}, cluster=_cluster(request, topology))
    lane = next(gen)
    try:
        stream = make_stream(4, 1000, seed=61, vocabulary=60, engagements_per_post=2.0, duplicate_share=0.0,
                             malformed_share=0.0, late_share=0.0, spike_at_s=0.0)
        records = list(stream.records(4000))
        named, copies = _with_event_ids(records, copies_every=5)
        lane.start_worker(0)
        lane.start_worker(1)
        lane.send([r for r in records if r.topic == "posts"])
        lane.wait_applied(120)  # posts first: every engagement finds its post held
        lane.send([x for pair in itertools.zip_longest(named, copies) for x in pair if x is not None])
        lane.wait_applied(120)
        time.sleep(2 * lane.settings.speed.flush_every_s)  # the copies below come after a checkpoint
        lane.send(copies)
        lane.wait_applied(120)
        space, client = KeySpace.of(lane.settings), lane.redis
        Materializer(lane.settings).write_all()
        sent = [*(r for r in records if r.topic == "posts"), *named]  # each event id once: the copies add nothing
        by_tag, spellings, score = _post_reference(sent, lane.settings.speed.engagement_weights())
        assert not list(client.scan_iter(match=space.match("post:*"), count=1000))
        for (tag, hour), listed in by_tag.items():
            newest = decode_posts(unpack(client.get(space.merged_new_posts(tag, hour))))
            assert [(e.created_ms, e.post_id, e.text) for e in newest] == sorted(listed, reverse=True), (tag, hour)
            expected = sorted(((score[pid], pid) for _, pid, _ in listed if pid in score), reverse=True)
            raw = client.get(space.merged_top_posts(tag, hour))
            top = decode_top_posts(unpack(raw)) if raw is not None else []
            assert [(e.score, e.post_id) for e in top] == expected, (tag, hour)
            display = client.hget(space.display(hour), tag).decode()
            assert display in spellings[tag], (tag, display)
        wait_until(lambda: lane.metric(0, "speed_orphan_engagements_total")
                   + lane.metric(1, "speed_orphan_engagements_total") == 0, 5, "no orphan engagement", lane)
        tag = max(spellings, key=lambda t: sum(len(v) for (t2, _), v in by_tag.items() if t2 == t))
        now = int(time.time() * 1000)
        answer = posts_answer(client, space, tag, 5, "top", None, now)
        totals = sorted(((score[pid], pid) for (t, _), v in by_tag.items() if t == tag for _, pid, _ in v
                         if pid in score), reverse=True)[:5]
        assert [(p["score"], p["post_id"]) for p in answer["posts"]] == totals
        assert all(p["text"] and p["user_id"] and p["created_at"] for p in answer["posts"])
    finally:
        gen.close()


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_partition_state_wait_returns_once_the_merger_merged_the_record(request, topology, stack, tmp_path):
    """`POST /posts?wait=true`: a checkpoint alone is not enough (no merger: it times out,
    though the worker stored the offset); with the merger running it returns, and the post is in the answers."""
    from fastapi.testclient import TestClient

    from serving.app import create_app
    from speed.materialize import Materializer

    gen = _lane(stack, tmp_path, cluster=_cluster(request, topology))
    lane = next(gen)
    token = "s3cret-token"
    auth = {"Authorization": f"Bearer {token}"}
    stop = threading.Event()

    def merging() -> None:
        materializer = Materializer(lane.settings)
        while not stop.is_set():
            materializer.write_all()
            time.sleep(0.5)

    def post(post_id: str) -> dict:
        return {"v": 1, "type": "post", "post_id": post_id, "user_id": "u1", "region": "US",
                "text": "waiting for #WaitMerged", "created_at": format_time(int(time.time() * 1000))}

    merger = threading.Thread(target=merging, daemon=True)
    try:
        lane.start_worker(0)

        def api_settings(wait_s: float) -> Settings:
            return lane.settings.model_copy(update={"api": lane.settings.api.model_copy(
                update={"token": token, "wait_timeout_s": wait_s})})

        space = KeySpace.of(lane.settings)
        with TestClient(create_app(api_settings(4.0))) as api:
            first = api.post("/posts?wait=true", json=post("w-1"), headers=auth).json()
        assert first["counted"] is False, first
        where = first["records"][0]
        wait_until(lambda: int(lane.redis.get(space.part_offset(where["partition"], where["topic"])) or 0)
                   > where["offset"], 30, "the first post checkpointed", lane)
        assert lane.redis.get(space.part_merged(where["partition"], where["topic"])) is None  # not merged yet
        merger.start()
        with TestClient(create_app(api_settings(30.0))) as api:
            second = api.post("/posts?wait=true", json=post("w-2"), headers=auth).json()
            assert second["counted"] is True, second
            recent = api.get("/tags/waitmerged/posts?sort=recent&k=5").json()
            assert [p["post_id"] for p in recent["posts"]] == ["w-2", "w-1"]
            assert recent["posts"][0]["text"] == "waiting for #WaitMerged"
            count = api.get("/tags/waitmerged/count?window=1h").json()
            assert count["count"] >= 2 and count["display"] == "WaitMerged"
        at = second["records"][0]
        assert int(lane.redis.get(space.part_merged(at["partition"], at["topic"]))) > at["offset"]
    finally:
        stop.set()
        if merger.is_alive():
            merger.join(30)
        gen.close()


def test_partition_state_engagement_copies_with_one_event_id_count_once(partition_lane):
    """A retried write's copies (one event_id) weigh once, within a step and steps later (after a checkpoint);
    engagements without an event_id all count; the merged top list shows the post's summed weight with its body.
    An engagement of a post the partition does not hold (sent before the post) is an orphan."""
    from speed.materialize import Materializer
    from trendcore.post_lists import decode_top_posts

    lane = partition_lane
    now = int(time.time() * 1000)
    k, w = lane.settings.kafka, lane.settings.speed
    lane.start_worker(0)
    producer = kafka_io.producer(k)

    def engage(post_id: str, kind: str, event_id: str | None) -> None:
        doc = {"v": 1, "type": "engagement", "post_id": post_id, "user_id": "u1", "kind": kind, "region": "FR",
               "created_at": format_time(now)}
        producer.send(k.engagements_topic, post_id.encode(),
                      orjson.dumps(doc if event_id is None else {**doc, "event_id": event_id}))

    engage("early", "like", None)  # its post comes later: not held when it is read
    producer.flush()
    lane.wait_applied(60)
    for post_id in ("dp", "early"):
        post = {"v": 1, "type": "post", "post_id": post_id, "user_id": "u0", "region": "FR", "text": "so #dedupe",
                "created_at": format_time(now)}
        producer.send(k.posts_topic, post_id.encode(), orjson.dumps(post))
    producer.flush()
    lane.wait_applied(60)
    for kind, event_id in [("like", "e1"), ("like", "e1"), ("view", None)]:  # one step: a copy within it
        engage("dp", kind, event_id)
    producer.flush()
    lane.wait_applied(60)
    time.sleep(2 * w.flush_every_s)
    for kind, event_id in [("like", "e1"), ("view", None), ("repost", "e2"), ("repost", "e2")]:  # later steps
        engage("dp", kind, event_id)
    producer.flush()
    lane.wait_applied(60)
    Materializer(lane.settings).write_all()
    space = KeySpace.of(lane.settings)
    top = decode_top_posts(unpack(lane.redis.get(space.merged_top_posts("dedupe", now // (60 * MINUTE_MS)))))
    assert [(e.post_id, e.score, e.text) for e in top] == [
        ("dp", w.weight_like + 2 * w.weight_view + w.weight_repost, "so #dedupe")]
    wait_until(lambda: lane.metric(0, "speed_orphan_engagements_total") == 1, 10, "one orphan engagement", lane)
