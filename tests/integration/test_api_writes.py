"""Write endpoints against real Kafka and Redis: token, rate limit, size limit, contract errors, ?wait=true."""

from __future__ import annotations

import threading
import time
import uuid

import orjson
import pytest
from fastapi.testclient import TestClient
from kafka import TopicPartition

from adapters import kafka as kafka_io
from adapters import redis as redis_io
from serving.app import create_app
from trendcore.events import format_time
from trendcore.keys import KeySpace

pytestmark = pytest.mark.integration
TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def make_api(stack, **api_overrides) -> TestClient:
    """An app of the session's stack with the test token and the given `api` settings."""
    api = stack.api.model_copy(update={"token": TOKEN, **api_overrides})
    return TestClient(create_app(stack.model_copy(update={"api": api})))


@pytest.fixture(scope="module")
def api(stack):
    with make_api(stack, wait_timeout_s=1.0) as client:
        yield client


def post(text: str = "hello #ServingTest", **overrides) -> dict:
    record = {"v": 1, "type": "post", "post_id": "p-" + uuid.uuid4().hex, "user_id": "u1", "region": "US",
              "text": text, "created_at": format_time(int(time.time() * 1000))}
    return {**record, **overrides}


def read_back(stack, topic: str, partition: int, offset: int) -> bytes:
    consumer = kafka_io.consumer(stack.kafka, consumer_timeout_ms=10_000)
    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek(tp, offset)
    record = next(iter(consumer))
    consumer.close()
    return record.value


def test_writes_need_the_bearer_token(api):
    assert api.post("/posts", json=post()).status_code == 401
    wrong = api.post("/posts", json=post(), headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and "token" in wrong.json()["detail"]
    assert wrong.headers["www-authenticate"] == "Bearer"


def test_one_post_is_produced_where_the_answer_says(api, stack):
    record = post()
    reply = api.post("/posts", json=record, headers=AUTH)
    assert reply.status_code == 202, reply.text
    body = reply.json()
    assert body["accepted"] == 1 and body["rejected"] == 0 and body["counted"] is None
    where = body["records"][0]
    value = orjson.loads(read_back(stack, where["topic"], where["partition"], where["offset"]))
    assert where["topic"] == stack.kafka.posts_topic
    assert value["post_id"] == record["post_id"] and value["text"] == record["text"]


def test_a_batch_reports_per_record_errors(api):
    records = [post(), post(region="XX"), post(text="x" * 1001), post(), {"v": 1, "type": "engagement"}]
    body = api.post("/posts", json=records, headers=AUTH).json()
    assert body["accepted"] == 2 and body["rejected"] == 3
    assert [(e["index"], e["field"]) for e in body["errors"]] == [(1, "region"), (2, "text"), (4, "type")]
    assert "1000" in body["errors"][1]["error"]


def test_events_route_posts_and_engagements_to_their_topics(api, stack):
    p = post()
    like = {"v": 1, "type": "engagement", "post_id": p["post_id"], "user_id": "u2", "kind": "like", "region": "US",
            "created_at": p["created_at"]}
    body = api.post("/events", json=[p, like], headers=AUTH).json()
    assert [r["topic"] for r in body["records"]] == [stack.kafka.posts_topic, stack.kafka.engagements_topic]
    assert body["records"][0]["partition"] == body["records"][1]["partition"]  # keyed by post id, same partition count
    assert api.post("/events", json=p, headers=AUTH).status_code == 422  # /events takes an array only


@pytest.mark.parametrize("content, needle", [(b"{not json", "malformed JSON"), (b"[]", "empty"), (b"42", "expected"),
                                             (b"[1]", "JSON object")])
def test_bad_bodies_get_422(api, content, needle):
    reply = api.post("/posts", content=content, headers={**AUTH, "content-type": "application/json"})
    assert reply.status_code == 422 and needle in reply.text


def test_bodies_over_one_mebibyte_get_413(api):
    records = [post(text="y" * 900) for _ in range(1300)]
    reply = api.post("/posts", content=orjson.dumps(records), headers={**AUTH, "content-type": "application/json"})
    assert reply.status_code == 413 and "bytes" in reply.json()["detail"]


def test_writes_are_rate_limited_with_retry_after(stack):
    with make_api(stack, write_rate_per_s=0.5, write_burst=2) as client:
        codes = [client.post("/posts", json=post(region="XX"), headers=AUTH).status_code for _ in range(3)]
        assert codes == [422, 422, 429]
        limited = client.post("/posts", json=post(), headers=AUTH)
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1


def test_wait_times_out_with_a_clear_message_when_nothing_counts(api):
    started = time.monotonic()
    body = api.post("/posts?wait=true", json=post(), headers=AUTH).json()
    assert body["accepted"] == 1 and body["counted"] is False and "had not counted it after 1 s" in body["message"]
    assert time.monotonic() - started < 5


def test_wait_returns_once_the_speed_layer_merged_the_offset(stack):
    """A stand-in for the speed layer: consumes the partition and stores the next offset where the API looks for
    it, as documented: the merger's merged offset (`part:{p<N>}:merged:{topic}`)."""
    with make_api(stack, wait_timeout_s=20.0) as client:
        stop, ready = threading.Event(), threading.Event()
        worker = threading.Thread(target=_count_offsets, args=(stack, stop, ready), daemon=True)
        worker.start()
        assert ready.wait(15)
        try:
            body = client.post("/posts?wait=true", json=post(), headers=AUTH).json()
        finally:
            stop.set()
            worker.join(15)
    assert body["counted"] is True and body["message"] is None


def _count_offsets(stack, stop: threading.Event, ready: threading.Event) -> None:
    """Until stopped: each posts record consumed, its next offset stored as the merger's merged offset."""
    redis, space = redis_io.client(stack.redis), KeySpace.of(stack)
    consumer = kafka_io.consumer(stack.kafka, consumer_timeout_ms=200)
    parts = [TopicPartition(stack.kafka.posts_topic, p) for p in range(stack.kafka.partitions)]
    consumer.assign(parts)
    for tp, end in consumer.end_offsets(parts).items():
        consumer.seek(tp, end)
        consumer.position(tp)
    ready.set()
    while not stop.is_set():
        for tp, records in consumer.poll(timeout_ms=200).items():
            redis.set(space.part_merged(tp.partition, tp.topic), records[-1].offset + 1, ex=600)
    consumer.close()
    redis.close()
