"""Redis over TLS with a key prefix, on the session's own Redis (its TLS listener, `stack.redis_tls_port`).

One lane (test_speed.py's: its own topics, group and Redis database) is pointed at rediss:// with the
stack's CA, a key prefix and an ACL user whose key pattern is that prefix: the speed layer, the API and
the batch publish run through it. Redis refuses (NOPERM) any key outside the pattern, so a single key
name built without the prefix fails the test; the database is then checked to hold nothing else.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from adapters import redis as redis_io
from batch import accuracy, jobs, status
from serving.app import create_app
from speed.reference import reference_sketches
from tests.integration.test_speed import Lane, _lane, assert_cells_match, make_stream
from trendcore.errors import ServiceError
from trendcore.keys import KeySpace
from trendcore.settings import RedisSettings, Settings, to_env
from trends.stack.redis import make_certificates, tls_files

pytestmark = pytest.mark.integration

PREFIX = "trends-tls:"
PUBLISHED_HOUR = 491_061  # a closed hour long ago: the publish writes its exact view


def over_tls(redis: RedisSettings, stack: Settings, **update) -> RedisSettings:
    """`redis` (same database) pointed at the stack Redis's TLS port, trusting the stack's CA."""
    db = redis.url.rsplit("/", 1)[1]
    url = f"rediss://127.0.0.1:{stack.stack.redis_tls_port}/{db}"
    return redis.model_copy(update={"url": url, "ca_file": tls_files(stack).ca, "retries": 1, **update})


@pytest.fixture(scope="module")
def tls_lane(stack: Settings, tmp_path_factory) -> Iterator[Lane]:
    """A speed lane over TLS, with PREFIX and an ACL user allowed only `~PREFIX*`; the user goes at the end."""
    if stack.stack.redis_tls_port is None:
        pytest.skip("the test stack has no Redis TLS port (stack.redis_tls_port)")
    lanes = _lane(stack, tmp_path_factory.mktemp("tls-lane"))
    lane = next(lanes)
    admin = redis_io.client(stack.redis)
    user, password = f"trends-tls-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    admin.acl_setuser(user, enabled=True, passwords=[f"+{password}"], keys=[f"{PREFIX}*"], commands=["+@all"])
    try:
        lane.settings = lane.settings.model_copy(update={"redis": over_tls(
            lane.settings.redis, stack, key_prefix=PREFIX, username=user, password=SecretStr(password))})
        yield lane
    finally:
        admin.acl_deluser(user)
        admin.close()
        lanes.close()  # stops the lane's workers and gives its database back


def test_the_acl_user_is_refused_any_key_outside_the_prefix(tls_lane):
    """What makes the tests below strict: an unprefixed name fails, with a hint at the prefix setting."""
    with pytest.raises(ServiceError, match="TRENDS_REDIS__KEY_PREFIX"), redis_io.redis_errors("GET"):
        tls_lane.redis.get(KeySpace().epoch(tls_lane.settings.speed.group))


@pytest.fixture(scope="module")
def speed_run(tls_lane: Lane):
    """A short speed run over TLS (one worker process, then one materializer round); yields the stream."""
    from speed.materialize import Materializer

    stream = make_stream(20, 1000, seed=0x715, late_share=0.0, malformed_share=0.0)
    redis_env = {k: v for k, v in to_env(tls_lane.settings).items() if k.startswith("TRENDS_REDIS__")}
    tls_lane.start_worker(0, **redis_env)
    tls_lane.produce(stream, 3_000)
    tls_lane.wait_applied(120)
    Materializer(tls_lane.settings).write_all()
    return stream


def test_the_speed_layer_over_tls_writes_the_reference_cells_under_the_prefix(tls_lane, speed_run):
    assert_cells_match(tls_lane, speed_run)  # scans PREFIX + cms:*: every sketch, byte for byte, and totals


def test_the_api_over_tls_reads_the_prefixed_keys(tls_lane, speed_run):
    settings = tls_lane.settings
    space, shape = KeySpace.of(settings), settings.sketch.shape
    api = settings.api.model_copy(update={"readiness_probe": "all:1h:volume"})
    with status.recorded(settings, "tls-check"):
        pass
    stored = orjson.loads(tls_lane.redis.get(space.trending("all", "1h", "volume")))
    top = stored["entries"][0]["tag"]
    expected = sum(s.estimate(top) for (region, unit, _), s in
                   reference_sketches(speed_run.truth.mentions, shape).items() if (region, unit) == ("all", "m"))
    with TestClient(create_app(settings.model_copy(update={"api": api}))) as client:
        trending = client.get("/trending", params={"window": "1h", "region": "all", "k": 5}).json()
        count = client.get(f"/tags/{top}/count", params={"window": "1h"}).json()
        series = client.get(f"/tags/{top}/series", params={"window": "1h"}).json()
        posts = client.get(f"/tags/{top}/posts", params={"sort": "recent", "k": 3}).json()
        ready = client.get("/readyz").json()
        metrics = client.get("/metrics").text
    assert [e["tag"] for e in trending["entries"]] == [e["tag"] for e in stored["entries"][:5]]
    assert count["count"] == expected > 0 and count["display"]
    assert sum(p["count"] for p in series["points"]) == expected
    assert len(posts["posts"]) == 3 and all(p["text"] and p["created_at"] for p in posts["posts"])
    assert ready["checks"]["redis"] == "ok" and ready["checks"]["snapshot"] == "ok"
    assert 'trends_batch_last_success_timestamp_seconds{job="tls-check"}' in metrics


def test_the_batch_publish_over_tls_swaps_views_under_the_prefix(tls_lane, speed_run, spark):
    settings = tls_lane.settings
    space, client = KeySpace.of(settings), tls_lane.redis
    counts = spark.createDataFrame([("US", PUBLISHED_HOUR, "tls", 3), ("US", PUBLISHED_HOUR, "redis", 2),
                                    ("all", PUBLISHED_HOUR, "tls", 3)], "region string, hour long, tag string, "
                                   "mentions long")
    result = jobs.JobResult("hourly", PUBLISHED_HOUR)
    published = jobs._publish_counts(settings, jobs._hour_views(counts, space), "t-tls", result)
    assert published == 4  # two views (the executors staged them over TLS) and their metas
    assert client.hgetall(space.exact_hour("US", PUBLISHED_HOUR)) == {b"tls": b"3", b"redis": b"2"}
    assert client.hget(space.exact_meta("all", "h", PUBLISHED_HOUR), "run_id") == b"t-tls"
    assert not list(client.scan_iter(space.match("tmp:*")))
    # the accuracy job reads the speed layer's hour sketch back through the prefix
    hour = max(minute for _, _, minute in speed_run.truth.mentions) // 60  # a speed hour sketch exists
    rows = accuracy.compare(settings, hour, {"all": {"tls": 1}}, {"all": 1})
    assert rows[0].sketch_present
    status.record_drift(settings, rows)


def test_nothing_outside_the_prefix_is_left_in_the_database(tls_lane, speed_run, stack):
    """The lane's database, read as the default user: every key the run wrote is under the prefix."""
    db = tls_lane.settings.redis.url.rsplit("/", 1)[1]
    plain = redis_io.client(stack.redis.model_copy(update={"url": stack.redis.url.rsplit("/", 1)[0] + f"/{db}"}))
    names = [k.decode() for k in plain.scan_iter(count=1000)]
    assert names and [k for k in names if not k.startswith(PREFIX)] == []
    kinds = {k.removeprefix(PREFIX).split(":")[0] for k in names}
    # the workers' checkpoints (part:{p<N>}:*) and what the merger and the materializer made of them
    assert {"part", "cms", "total", "cand", "authors", "postlist", "display", "epoch", "trending"} <= kinds


def _refused(redis: RedisSettings) -> str:
    """The ServiceError text of a PING with these settings (fails the test when the PING works)."""
    client = redis_io.client(redis.model_copy(update={"retries": 0}), socket_connect_timeout=1, socket_timeout=1)
    try:
        with pytest.raises(ServiceError) as failed, redis_io.redis_errors("PING"):
            client.ping()
    finally:
        client.close()
    return str(failed.value)


def test_a_wrong_ca_or_a_plain_url_to_the_tls_port_fails_clearly(stack: Settings, tmp_path: Path):
    if stack.stack.redis_tls_port is None:
        pytest.skip("the test stack has no Redis TLS port (stack.redis_tls_port)")
    tls = over_tls(stack.redis, stack)
    assert redis_io.client(tls).ping()  # the stack's own CA: trusted
    other = make_certificates(tmp_path / "other", "127.0.0.1", name="some other CA")
    for wrong in (tls.model_copy(update={"ca_file": other.ca}), tls.model_copy(update={"ca_file": None})):
        assert "TRENDS_REDIS__CA_FILE" in _refused(wrong)  # not signed by that CA (or by the system's CAs)
    plain = tls.model_copy(update={"url": "redis" + tls.url.removeprefix("rediss"), "ca_file": None})
    started = time.monotonic()
    assert "use a rediss:// URL" in _refused(plain)
    assert time.monotonic() - started < 5  # refused at once, not after a timeout
    tls_to_plain = tls.model_copy(update={"url": "rediss" + stack.redis.url.removeprefix("redis")})
    assert "does not speak TLS" in _refused(tls_to_plain)
