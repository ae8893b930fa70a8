"""Broker faults during consumption (issue #26, item 5): the Kafka broker is killed with SIGKILL while
speed workers (real processes) consume, and restarted on the same port and data directory.

The broker is a dedicated one, started for this module through the stack manager's own Kafka start
(trends/stack/kafka.py) on ports of the test range (PYTEST_TRENDS_BASE_PORT + 44 and + 45) with its own
data directory under tmp_path: the session's broker is shared by every other test (module fixtures keep
clients, topics and groups on it), so a kill there would couple their outcome to this one's restart.
Redis is the session's, in a lane database of its own (tests/integration/test_speed.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from kafka import TopicPartition

from adapters import kafka as kafka_io
from tests.integration.test_speed import POISON, Lane, _lane, assert_cells_match, make_stream, wait_until
from trendcore import keys
from trendcore.events import format_time
from trendcore.settings import Settings
from trends.gen.model import Record
from trends.stack import kafka as kafka_stack
from trends.stack import procs

pytestmark = pytest.mark.integration

BROKER_PORT, CONTROLLER_PORT = 44, 45
"""Offsets from PYTEST_TRENDS_BASE_PORT of the dedicated broker's listeners (no other test uses them)."""
DOWN_S = 8.0
"""How long the broker stays dead: longer than the workers' 6 s session timeout (Lane.env)."""
HOLD_MS = 300
"""Each worker holds each step this long (test_speed.holding_worker), so the kill falls mid-stream."""
PACING = {"TRENDS_SPEED__MAX_BATCH_RECORDS": "500", "TRENDS_SPEED__POSTS_PER_TAG": "1000000"}
"""Small polls, for the same reason; top-post sets never trimmed, so a post's score there is the sum of every
weight applied to it."""


def _port(offset: int) -> int:
    """A port of the test range, as tests/conftest.py derives the session's."""
    return int(os.environ.get("PYTEST_TRENDS_BASE_PORT", "29000")) + offset


@pytest.fixture(scope="module")
def broker(stack: Settings, tmp_path_factory) -> Iterator[Settings]:
    """The session settings pointed at a dedicated single-node KRaft broker, stopped at the end."""
    home = tmp_path_factory.mktemp("broker")
    settings = stack.model_copy(update={
        "stack": stack.stack.model_copy(update={"home": home, "kafka_controller_port": _port(CONTROLLER_PORT),
                                                "kafka_sasl_port": None, "kafka_heap": "-Xms128m -Xmx512m"}),
        "kafka": stack.kafka.model_copy(update={"bootstrap": f"127.0.0.1:{_port(BROKER_PORT)}"}),
    })
    kafka_stack.start(settings)
    try:
        yield settings
    finally:
        procs.stop(kafka_stack.service(settings))


@pytest.fixture
def broker_lane(broker: Settings, tmp_path: Path) -> Iterator[Lane]:
    yield from _lane(broker, tmp_path)


@contextlib.contextmanager
def killed_broker(settings: Settings, down_s: float) -> Iterator[int]:
    """SIGKILL the broker, keep it dead `down_s`, and restart it on the same port and data directory
    whatever happens in the block (it yields the killed PID)."""
    svc = kafka_stack.service(settings)
    pid = procs.read_pid(svc)
    assert pid is not None and procs.pid_alive(pid), "the dedicated broker is not running"
    os.kill(pid, signal.SIGKILL)
    try:
        wait_until(lambda: not procs.pid_alive(pid) and not procs.port_open(svc.host, svc.port), 30,
                   "the killed broker to be gone")
        yield pid
        time.sleep(down_s)
    finally:
        kafka_stack.start(settings)


def applied(lane: Lane, topic: str | None = None) -> int:
    """Records applied so far: the sum of the next offsets Redis stores for the input partitions (of
    `topic` only, when given)."""
    space, group = keys.KeySpace.of(lane.settings.redis), lane.settings.speed.group
    names = [space.offset(group, t, p) for t, p in lane.topic_partitions() if topic in (None, t)]
    return sum(int(v) for v in lane.redis.mget(names) if v is not None)


def both_topics_advanced(lane: Lane, since: dict[str, int], by: dict[str, int]) -> bool:
    """Each input topic applied at least `by[topic]` records more than `since[topic]`."""
    return all(applied(lane, topic) >= since[topic] + by[topic] for topic in since)


def poison_records(lane: Lane) -> list[Record]:
    """Hand-made poison (test_speed.POISON) on the posts topic and one post on the engagements topic."""
    wrong_type = orjson.dumps({"v": 1, "type": "post", "post_id": "x", "user_id": "u", "region": "US",
                               "text": "#oops", "created_at": format_time(int(time.time() * 1000))})
    records = [Record("posts", f"poison-{i}".encode(), value, "poison") for i, value in enumerate(POISON)]
    return [*records, Record("engagements", b"poison-eng", wrong_type, "poison")]


def interleave(records: list[Record], extra: list[Record]) -> list[Record]:
    """`records` with `extra` spread evenly through them."""
    out, step = list(records), max(1, len(records) // (len(extra) + 1))
    for i, record in enumerate(extra):
        out.insert((i + 1) * step + i, record)
    return out


def dead_letters(lane: Lane) -> list[tuple[str, dict]]:
    """Every record of the lane's dead-letter topic, as (Kafka key, JSON value)."""
    k = lane.settings.kafka
    ends = kafka_io.end_offsets(k, k.dead_letter_topic)
    consumer = kafka_io.consumer(k, consumer_timeout_ms=5000)
    tps = [TopicPartition(k.dead_letter_topic, p) for p in ends]
    consumer.assign(tps)
    consumer.seek_to_beginning()
    out: list[tuple[str, dict]] = []
    deadline = time.monotonic() + 60
    while sum(consumer.position(tp) for tp in tps) < sum(ends.values()):
        assert time.monotonic() < deadline, "the dead-letter topic could not be read to its end"
        for records in consumer.poll(timeout_ms=1000).values():
            out.extend((r.key.decode(), orjson.loads(r.value)) for r in records)
    consumer.close()
    return out


def engagement_weights(records: list[Record], weights: dict[str, float]) -> dict[str, float]:
    """The reference: summed engagement weight per post id, from the engagement records sent."""
    total: dict[str, float] = defaultdict(float)
    for record in records:
        if record.topic == "engagements" and record.kind == "engagement":
            doc = orjson.loads(record.value)
            total[doc["post_id"]] += weights[doc["kind"]]
    return total


def assert_scores_match(lane: Lane, reference: dict[str, float]) -> int:
    """Each engaged post's score in every top-posts set it belongs to equals its reference weight: an
    engagement applied twice (or lost) shows as a different score. Returns the scores compared."""
    client, space = lane.redis, keys.KeySpace.of(lane.settings.redis)
    compared, wrong = 0, []
    for post_id, weight in reference.items():
        top = client.hget(space.post(post_id), "top")
        assert top, f"post {post_id} has no hash or no top-posts sets"
        for name in top.decode().split("\n"):
            score = client.zscore(name, post_id)
            compared += 1
            if score != weight:
                wrong.append((post_id, name, score, weight))
    assert not wrong, f"{len(wrong)} of {compared} top-post scores differ from the reference, e.g. {wrong[:3]}"
    return compared


def test_broker_killed_mid_stream_and_restarted_changes_no_cell_letter_or_score(broker_lane, broker):
    """Phase 1 (posts) is applied; phase 2 (posts, engagements of phase 1's posts, poison) is sent and
    the broker is killed -9 once part of it is applied, kept dead 8 s and restarted on its data
    directory; phase 3 (the remaining engagements) follows. Every cell equals the reference, each
    poison record has one dead letter (or identical copies keyed by its source coordinates), and
    every engaged post's top-post score equals its weighted engagement sum: none applied twice."""
    lane = broker_lane
    stream = make_stream(20, 1000, seed=71, engagements_per_post=1.0, malformed_share=0.01, duplicate_share=0.01)
    records = list(stream.records(20_000))
    cut = [i for i, r in enumerate(records) if r.kind == "post"][10_000]  # the stream's 10,001st post starts phase 2
    first, second = records[:cut], records[cut:]
    phase1 = [r for r in first if r.topic == "posts"]
    phase2 = interleave([r for r in second if r.topic == "posts"] + [r for r in first if r.topic != "posts"],
                        poison_records(lane))
    phase3 = [r for r in second if r.topic != "posts"]
    for index in (0, 1):
        lane.start_worker(index, hold_ms=HOLD_MS, **PACING)
    lane.send(phase1)
    lane.wait_applied(120)
    before = applied(lane)
    k = lane.settings.kafka
    since = {t: applied(lane, t) for t in (k.posts_topic, k.engagements_topic)}
    tenth = {k.posts_topic: sum(r.topic == "posts" for r in phase2) // 10,
             k.engagements_topic: sum(r.topic == "engagements" for r in phase2) // 10}
    lane.send(phase2)
    wait_until(lambda: both_topics_advanced(lane, since, tenth), 60, "a tenth of phase 2 applied on each topic", lane)
    with killed_broker(broker, DOWN_S):
        at_kill = applied(lane)
    at_restart = applied(lane)  # the workers applied what they had fetched, then waited
    assert before < at_kill <= at_restart < before + len(phase2), (
        f"not killed mid-stream: {at_kill - before}, then {at_restart - before} of {len(phase2)} applied")
    lane.wait_applied(150)
    assert all(proc.poll() is None for proc in lane.procs.values()), f"a worker died\n{lane.log_tails()}"
    lane.send(phase3)
    lane.wait_applied(60)

    cells = assert_cells_match(lane, stream)
    letters = dead_letters(lane)
    expected_keys = {r.key.decode() for r in phase1 + phase2 if r.kind == "malformed"} | {
        f"poison-{i}" for i in range(len(POISON))} | {"poison-eng"}
    by_source = defaultdict(list)
    for key, doc in letters:
        assert key == f"{doc['topic']}:{doc['partition']}:{doc['offset']}", f"key {key} is not the source of {doc}"
        by_source[key].append({k: v for k, v in doc.items() if k != "at_ms"})
    assert {docs[0]["key"] for docs in by_source.values()} == expected_keys
    assert len(by_source) == len(expected_keys), "a poison record was dead-lettered from two source offsets"
    assert all(d == docs[0] for docs in by_source.values() for d in docs), "copies of a dead letter differ"
    reference = engagement_weights(records, lane.settings.speed.engagement_weights())
    scores = assert_scores_match(lane, reference)
    copies = Counter(len(docs) for docs in by_source.values())
    counters = {name: sum(lane.metric(i, name) for i in (0, 1)) for name in (
        "speed_batches_refused_total", "speed_orphan_engagements_total", "speed_stalled_rebalances_total",
        "speed_kafka_unavailable_total")}
    print(f"records sent {len(records) + len(POISON) + 1}, phase 2 {len(phase2)}; phase 2 applied at the kill "
          f"{at_kill - before}, at the restart {at_restart - before}; cells compared {cells}; dead letters "
          f"{len(letters)} for {len(expected_keys)} poison records (copies per record: {dict(copies)}); engaged "
          f"posts {len(reference)}, top-post scores compared {scores}; {counters}")


def drive(worker, until, timeout_s: float, what: str) -> None:
    """Turn an in-process worker's loop (`Worker._cycle`) until `until()` or fail after the timeout."""
    deadline = time.monotonic() + timeout_s
    while not until():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:.0f} s waiting for {what}"
        worker._cycle()


def test_a_worker_polling_while_the_broker_is_dead_keeps_going_and_catches_up(broker_lane, broker, monkeypatch):
    """The worker's own loop, turned in this process through an outage: kafka-python 3.0.12 raises
    KafkaConnectionError from poll() when its coordinator look-up meets a refused connection, which
    used to end `trends speed run` (the kill test above saw it once in three runs). Here the worker's
    clients reconnect without backoff, so every poll while the broker is dead meets one: the loop must
    count them, keep turning, and apply the rest exactly once after the restart."""
    from prometheus_client import REGISTRY

    from speed.worker import Worker

    real = kafka_io.consumer
    monkeypatch.setattr(kafka_io, "consumer", lambda kafka, *topics, **options: real(
        kafka, *topics, **options, reconnect_backoff_ms=0, reconnect_backoff_max_ms=1))
    lane = broker_lane
    stream = make_stream(5, 1000, seed=72, engagements_per_post=0.5, malformed_share=0.005)
    records = list(stream.records(4_000))
    lane.send(records[: len(records) // 2])
    worker = Worker(lane.settings, "broker-down-test")

    def unavailable() -> float:
        return REGISTRY.get_sample_value("speed_kafka_unavailable_total") or 0.0

    try:
        worker._await_metadata()
        worker._subscribe()
        ends = lane.end_offsets()
        drive(worker, lambda: lane.all_applied(ends), 60, "the first half applied")
        before, turns = unavailable(), 0
        with killed_broker(broker, 0):
            deadline = time.monotonic() + DOWN_S
            while time.monotonic() < deadline:
                worker._cycle()
                turns += 1
        errors = unavailable() - before
        assert errors >= 1, "no poll met the dead broker's refused connection: the test exercised nothing"
        lane.send(records[len(records) // 2:])
        ends = lane.end_offsets()
        drive(worker, lambda: lane.all_applied(ends), 90, "the second half applied")
    finally:
        worker.close()
    cells = assert_cells_match(lane, stream)
    print(f"loop turns while the broker was dead {turns}, retriable poll errors {errors:.0f}, cells compared {cells}")
