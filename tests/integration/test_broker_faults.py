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
import sys
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
from trendcore.events import format_time, parse_timestamp
from trendcore.hashtags import tag_keys
from trendcore.packing import unpack
from trendcore.settings import Settings
from trendcore.windows import HOUR_MS
from trends.gen.model import Record
from trends.stack import kafka as kafka_stack
from trends.stack import procs

pytestmark = pytest.mark.integration

BROKER_PORT, CONTROLLER_PORT = 44, 45
"""Offsets from PYTEST_TRENDS_BASE_PORT of the dedicated broker's listeners (no other test uses them)."""
DOWN_S = 8.0
"""How long the broker stays dead: longer than the workers' 6 s session timeout (Lane.env)."""
HOLD_MS = 300
"""Each worker holds each checkpoint this long (test_speed.holding_worker), so the kill falls mid-stream."""
PACING = {"max_batch_records": 500, "posts_per_tag": 1_000_000}
"""Small polls, for the same reason; top-post lists never trimmed (the workers' nor the merger's), so a post's
score there is the sum of every weight applied to it."""
EAGER_WORKER = "from tests.integration.test_broker_faults import eager_worker; eager_worker()"


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
    """A lane on the dedicated broker, its settings and workers paced by PACING."""
    yield from _lane(broker, tmp_path, speed=PACING)


def eager_worker() -> None:
    """`trends speed run` whose Kafka consumers reconnect without backoff (`python -c EAGER_WORKER run --index i`),
    so every poll while the broker is dead meets a refused connection. A test hook, patched in here: the worker
    has no such knob."""
    from speed.cli import app

    real = kafka_io.consumer

    def eager(kafka, *topics, **options):
        return real(kafka, *topics, **options, reconnect_backoff_ms=0, reconnect_backoff_max_ms=1)

    kafka_io.consumer = eager
    app(args=sys.argv[1:], prog_name="speed")


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
    """Records checkpointed so far: the sum of the next offsets Redis stores for the input partitions (of
    `topic` only, when given)."""
    space = keys.KeySpace.of(lane.settings)
    names = [space.part_offset(p, t) for t, p in lane.topic_partitions() if topic in (None, t)]
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


def tag_hours(records: list[Record]) -> dict[str, set[tuple[str, int]]]:
    """The (tag, hour) lists each post sent belongs to, by post id."""
    found: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for record in records:
        if record.topic == "posts" and record.kind == "post":
            doc = orjson.loads(record.value)
            hour = parse_timestamp(doc["created_at"]) // HOUR_MS
            found[doc["post_id"]].update((tag, hour) for tag, _ in tag_keys(doc["text"]))
    return found


def assert_scores_match(lane: Lane, records: list[Record], reference: dict[str, float]) -> int:
    """Every merged top-posts list (the merger ran: assert_cells_match) of a tag and hour holds exactly the
    engaged posts of that tag and hour, each with its reference weight: an engagement applied twice (or lost)
    shows as a different score. Returns the scores compared."""
    from trendcore.post_lists import decode_top_posts

    client, space = lane.redis, keys.KeySpace.of(lane.settings)
    expected: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    for post_id, lists in tag_hours(records).items():
        for tag_hour in lists:
            if post_id in reference:
                expected[tag_hour][post_id] = round(reference[post_id], 6)
    assert {p for scores in expected.values() for p in scores} == set(reference), "an engaged post without a tag"
    compared, wrong = 0, []
    for (tag, hour), scores in expected.items():
        raw = client.get(space.merged_top_posts(tag, hour))
        found = {e.post_id: round(e.score, 6) for e in decode_top_posts(unpack(raw))} if raw is not None else {}
        compared += len(scores)
        if found != scores:  # sums in another order may differ in the last bits: rounded to 1e-6
            wrong.append(((tag, hour), {p: (found.get(p), scores.get(p)) for p in found.keys() | scores.keys()
                                        if found.get(p) != scores.get(p)}))
    assert not wrong, f"{len(wrong)} of {len(expected)} top-post lists differ from the reference, e.g. {wrong[:3]}"
    return compared


def test_broker_killed_mid_stream_and_restarted_changes_no_cell_letter_or_score(broker_lane, broker):
    """Phase 1 (posts) is applied; three quarters of phase 2 (posts, engagements of phase 1's posts, poison)
    are sent and the broker is killed -9 once part of them is applied, kept dead 8 s and restarted on its
    data directory; the rest of phase 2, then phase 3 (the remaining engagements) follow. Every cell equals
    the reference, each poison record has one dead letter (or identical copies keyed by its source
    coordinates), and every engaged post's top-post score equals its weighted engagement sum: none applied
    twice."""
    lane = broker_lane
    # 200 tags, fewer than speed.candidates: every tag is a candidate, so each keeps its top-posts list
    stream = make_stream(20, 1000, seed=71, engagements_per_post=1.0, malformed_share=0.01, duplicate_share=0.01,
                         vocabulary=200)
    records = list(stream.records(20_000))
    cut = [i for i, r in enumerate(records) if r.kind == "post"][10_000]  # the stream's 10,001st post starts phase 2
    first, second = records[:cut], records[cut:]
    phase1 = [r for r in first if r.topic == "posts"]
    phase2 = interleave([r for r in second if r.topic == "posts"] + [r for r in first if r.topic != "posts"],
                        poison_records(lane))
    phase3 = [r for r in second if r.topic != "posts"]
    for index in (0, 1):
        lane.start_worker(index, hold_ms=HOLD_MS)
    lane.send(phase1)
    lane.wait_applied(120)
    before = applied(lane)
    k = lane.settings.kafka
    since = {t: applied(lane, t) for t in (k.posts_topic, k.engagements_topic)}
    tenth = {k.posts_topic: sum(r.topic == "posts" for r in phase2) // 10,
             k.engagements_topic: sum(r.topic == "engagements" for r in phase2) // 10}
    # the last quarter of phase 2 goes after the restart: the workers may well have fetched everything sent
    # before the kill (one fetch holds it all) and applied it while the broker was down
    early = len(phase2) * 3 // 4
    lane.send(phase2[:early])
    wait_until(lambda: both_topics_advanced(lane, since, tenth), 60, "a tenth of phase 2 applied on each topic", lane)
    with killed_broker(broker, DOWN_S):
        at_kill = applied(lane)
    at_restart = applied(lane)  # the workers applied what they had fetched, then waited
    assert before < at_kill <= at_restart <= before + early, (
        f"not killed mid-stream: {at_kill - before}, then {at_restart - before} of {early} applied")
    lane.send(phase2[early:])
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
    scores = assert_scores_match(lane, records, reference)
    copies = Counter(len(docs) for docs in by_source.values())
    counters = {name: sum(lane.metric(i, name) for i in (0, 1)) for name in (
        "speed_batches_refused_total", "speed_orphan_engagements_total", "speed_stalled_rebalances_total",
        "speed_kafka_unavailable_total")}
    print(f"records sent {len(records) + len(POISON) + 1}, phase 2 {len(phase2)}; phase 2 applied at the kill "
          f"{at_kill - before}, at the restart {at_restart - before}; cells compared {cells}; dead letters "
          f"{len(letters)} for {len(expected_keys)} poison records (copies per record: {dict(copies)}); engaged "
          f"posts {len(reference)}, top-post scores compared {scores}; {counters}")


def test_a_worker_polling_while_the_broker_is_dead_keeps_going_and_catches_up(broker_lane, broker):
    """A worker process through an outage: kafka-python 3.0.12 raises KafkaConnectionError from poll() when its
    coordinator look-up meets a refused connection, which used to end `trends speed run` (the kill test above
    saw it once in three runs). Here the worker's consumers reconnect without backoff (`eager_worker`), so every
    poll while the broker is dead meets one: the worker must count them, keep running, and apply the rest
    exactly once after the restart."""
    lane = broker_lane
    stream = make_stream(5, 1000, seed=72, engagements_per_post=0.5, malformed_share=0.005)
    records = list(stream.records(4_000))
    lane.send(records[: len(records) // 2])
    worker = lane.start_worker(0, hook=EAGER_WORKER)
    lane.wait_applied(60)
    before = lane.metric(0, "speed_kafka_unavailable_total")
    with killed_broker(broker, DOWN_S):
        pass  # dead for DOWN_S, then restarted
    errors = lane.metric(0, "speed_kafka_unavailable_total") - before
    assert errors >= 1, "no poll met the dead broker's refused connection: the test exercised nothing"
    assert worker.poll() is None, f"the worker stopped\n{lane.log_tails()}"
    lane.send(records[len(records) // 2:])
    lane.wait_applied(90)
    assert worker.poll() is None, f"the worker stopped\n{lane.log_tails()}"
    cells = assert_cells_match(lane, stream)
    print(f"retriable poll errors while the broker was dead {errors:.0f}, cells compared {cells}")
