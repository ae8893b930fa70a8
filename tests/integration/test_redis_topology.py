"""Redis Cluster and Sentinel with real servers (TRENDS_REDIS__MODE=cluster / sentinel).

The cluster is three masters the stack itself starts (TRENDS_STACK__REDIS_CLUSTER_PORTS, ports base+50..52,
bus ports base+60..62):
the project's client spreads keys over them, the batch publish stages and RENAMEs views on them (executor
code, then the Spark jobs), and the API answers a count from an exact view there. The Sentinel set is a
master, a replica and a Sentinel (ports base+53..55): the master is SIGKILLed and the client's next write
lands on the promoted replica.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
import uuid
from collections.abc import Iterator

import pyarrow as pa
import pytest
import redis as redis_py
from fastapi.testclient import TestClient

from adapters import redis as redis_io
from batch import jobs, publish, transforms
from serving.app import create_app
from tests.integration.layout import unique
from trendcore.events import format_time
from trendcore.hll import HyperLogLog
from trendcore.keys import KeySpace
from trendcore.post_lists import TopPost, encode_top_posts
from trendcore.settings import RedisSettings, Settings
from trendcore.windows import HOUR_MS
from trends.stack import manager, procs, redis_cluster, redis_sentinel

pytestmark = pytest.mark.integration

BASE = int(os.environ.get("PYTEST_TRENDS_BASE_PORT", "29000"))
CLUSTER_PORTS = [BASE + 50, BASE + 51, BASE + 52]
BUS_PORTS = [BASE + 60, BASE + 61, BASE + 62]
"""Below the kernel's ephemeral range (32768 up), unlike Redis's default port + 10000, which a client's
outgoing connection may hold: CI once failed on `bind: Address already in use` for base + 10052."""
SENTINEL_PORTS = (BASE + 53, BASE + 54, BASE + 55)
HOST = "127.0.0.1"
TTL_S = 3600


def on_cluster(settings: Settings) -> Settings:
    """The test settings with the stack's Redis a local cluster, and the clients in cluster mode."""
    own = settings.model_copy(deep=True)
    own.stack.redis_cluster_ports = CLUSTER_PORTS
    own.stack.redis_cluster_bus_ports = BUS_PORTS
    own.redis = RedisSettings(url=f"redis://{HOST}:{CLUSTER_PORTS[0]}/0", mode="cluster", retries=2)
    return own


@pytest.fixture(scope="module")
def cluster(settings: Settings) -> Iterator[Settings]:
    """Three masters started (and at the end stopped) through the stack's own components; a fresh cluster
    each session (the nodes.conf files of an earlier one are removed first)."""
    own = on_cluster(settings)
    names = redis_cluster.names(own)
    if all(procs.state(manager.components(own)[n].service(own)) == "stopped" for n in names):
        shutil.rmtree(own.stack.home / "redis-cluster", ignore_errors=True)
    manager.up(own, names=names, log=lambda _m: None)
    try:
        yield own
    finally:
        manager.down(own, names=names, log=lambda _m: None)


def direct(port: int) -> redis_py.Redis:
    """A plain client of one server, to see where keys are."""
    return redis_py.Redis(host=HOST, port=port, socket_timeout=5)


def test_the_stack_runs_three_masters_serving_every_slot(cluster):
    rows = {r["name"]: r for r in manager.status(cluster)}
    assert [rows[n]["state"] for n in redis_cluster.names(cluster)] == ["running"] * 3
    assert "redis" not in rows  # the cluster replaces the single Redis
    info = direct(CLUSTER_PORTS[1]).execute_command("CLUSTER INFO")
    assert (info["cluster_state"], int(info["cluster_size"]), int(info["cluster_slots_ok"])) == ("ok", 3, 16384)


def test_the_cluster_client_spreads_keys_over_the_three_masters(cluster):
    client, run = redis_io.client(cluster.redis), uuid.uuid4().hex[:8]
    names = [f"topo:{run}:{i}" for i in range(300)]
    with redis_io.redis_errors("writing test keys"):
        pipe = client.pipeline(transaction=False)
        for i, name in enumerate(names):
            pipe.set(name, i, ex=TTL_S)
        pipe.execute()
        values = redis_io.mget(client, names)  # one MGET per slot
        scanned = set(client.scan_iter(match=f"topo:{run}:*", count=1000))  # SCAN on every node
    assert [int(v) for v in values] == list(range(300))
    assert scanned == {n.encode() for n in names}
    per_node = [len(list(direct(port).scan_iter(match=f"topo:{run}:*", count=1000))) for port in CLUSTER_PORTS]
    assert sum(per_node) == 300 and min(per_node) > 50, per_node  # about a third on each master
    client.close()


def _stage(settings: Settings, run_id: str, rows: list[tuple[str, str, float]], zset: bool = False) -> list:
    """Stage (key, field, value) rows sorted by key and field as the executors do (publish.stage_writer)."""
    rows = sorted(rows)
    batch = pa.RecordBatch.from_arrays([pa.array([r[i] for r in rows]) for i in range(3)],
                                       names=["key", "field", "value"])
    out = list(publish.stage_writer(settings, run_id, zset, TTL_S)(iter([batch])))
    return sorted(publish.Staged(**row) for row in out[0].to_pylist())


def _publish_hour(settings: Settings, region: str, hour: int, counts: dict[str, int], run_id: str) -> None:
    """An exact hour view and its meta, published by the batch layer's own functions (no Spark)."""
    key = KeySpace.of(settings).exact_hour(region, hour)
    staged = _stage(settings, run_id, [(key, tag, float(n)) for tag, n in counts.items()])
    publish.swap(settings, run_id, [s.key for s in staged])
    prints = {s.key: publish.ViewPrint(s.rows, int(s.total), 0) for s in staged}
    publish.exact_metas(settings, run_id, staged, prints)


def test_the_publish_swaps_views_and_copies_baselines_on_the_cluster(cluster):
    space, client = KeySpace.of(cluster), redis_io.client(cluster.redis)
    hour, tag = 480_000 + int(time.time()) % 1000, unique("pub")
    key = space.exact_hour("US", hour)
    _publish_hour(cluster, "US", hour, {tag: 3, "other": 2}, "t-one")
    assert client.hgetall(key) == {tag.encode(): b"3", b"other": b"2"}
    _publish_hour(cluster, "US", hour, {tag: 5}, "t-two")  # the new content replaces the old at once
    assert client.hgetall(key) == {tag.encode(): b"5"}
    assert client.hget(space.exact_meta("US", "h", hour), "run_id") == b"t-two"
    prints = {key: publish.ViewPrint(1, 5, 0)}
    assert publish.unchanged_views(cluster, prints) == {key}
    # a trailing baseline: staged once, COPYed server-side to other hours of week of its region
    region = "Z" + uuid.uuid4().hex[:3].upper()
    first = space.baseline(region, 10)
    staged = _stage(cluster, "t-base", [(first, tag, 4.0), (first, "other", 1.5)])
    publish.swap(cluster, "t-base", [s.key for s in staged], {first: [space.baseline(region, h) for h in (11, 12)]})
    assert {client.dump(space.baseline(region, h)) for h in (10, 11, 12)} == {client.dump(first)}
    assert client.hget(space.baseline(region, 12), tag) == b"4"
    assert not list(client.scan_iter(match=space.match("tmp:*")))
    client.close()


def test_the_spark_jobs_publish_counts_and_baselines_on_the_cluster(cluster, spark):
    space, client = KeySpace.of(cluster), redis_io.client(cluster.redis)
    hour, day = 470_000 + int(time.time()) % 1000, 19_000 + int(time.time()) % 1000
    counts = spark.createDataFrame([("US", hour, "spark", 3), ("US", hour, "redis", 2), ("all", hour, "spark", 3)],
                                   "region string, hour long, tag string, mentions long")
    result = jobs.JobResult("hourly", hour)
    assert jobs._publish_counts(cluster, jobs._hour_views(counts, space), "t-spark", result) == 4
    assert client.hgetall(space.exact_hour("US", hour)) == {b"spark": b"3", b"redis": b"2"}
    assert client.hget(space.exact_meta("all", "h", hour), "run_id") == b"t-spark"
    hows = transforms.next_hours_of_week(day)
    base = spark.createDataFrame([("US", hows[0], "spark", 2.5)],
                                 "region string, hour_of_week int, tag string, expected double")
    assert jobs._publish_baselines(cluster, base, day, True, "t-spark") == 24  # one staged, 23 copies
    assert {client.hget(space.baseline("US", h), "spark") for h in hows} == {b"2.5"}
    assert not list(client.scan_iter(match=space.match("tmp:*")))
    client.close()


def test_the_api_counts_from_an_exact_view_and_reads_a_tags_hours_on_the_cluster(cluster):
    space, client = KeySpace.of(cluster), redis_io.client(cluster.redis)
    tag, now_hour = unique("api"), int(time.time() * 1000) // HOUR_MS
    hour = now_hour - 3
    _publish_hour(cluster, "all", hour, {tag: 7, "someone": 2}, "t-api")
    for h, authors in ((hour, ["a", "b"]), (hour - 1, ["b", "c"])):  # distinct authors: a union over hours
        sketch = HyperLogLog()
        sketch.add(authors)
        client.set(space.merged_authors(tag, h), sketch.to_bytes(), ex=TTL_S)
    top = {hour: [TopPost(5.0, hour * HOUR_MS, "p2", "#api two", "US", "u2")],  # top posts over the tag's hours
           hour - 1: [TopPost(6.0, (hour - 1) * HOUR_MS, "p1", "#api one", "US", "u1")]}
    for h, entries in top.items():
        client.set(space.merged_top_posts(tag, h), encode_top_posts(entries), ex=TTL_S)
    with TestClient(create_app(cluster)) as api:
        ranged = api.get(f"/tags/{tag}/count", params={"from": format_time(hour * HOUR_MS),
                                                       "to": format_time((hour + 1) * HOUR_MS)}).json()
        window = api.get(f"/tags/{tag}/count", params={"window": "24h"}).json()
        posts = api.get(f"/tags/{tag}/posts", params={"sort": "top", "k": 2}).json()
    assert (ranged["source"], ranged["count"]) == ("exact", 7)
    assert window["count"] == 7 and "exact" in {s["source"] for s in window["spans"]}
    assert window["authors"] == 3
    assert [(p["post_id"], p["score"]) for p in posts["posts"]] == [("p1", 6.0), ("p2", 5.0)]
    client.close()


def test_down_then_up_restarts_the_cluster_from_its_nodes_conf(cluster):
    names = redis_cluster.names(cluster)
    manager.down(cluster, names=names, log=lambda _m: None)
    assert {r["state"] for r in manager.status(cluster) if r["name"] in names} == {"stopped"}
    manager.up(cluster, names=names, log=lambda _m: None)  # no new `--cluster create`: the nodes.conf files
    client = redis_io.client(cluster.redis)
    with redis_io.redis_errors("SET after a restart"):
        assert client.set("topo:restarted", 1, ex=TTL_S) and client.get("topo:restarted") == b"1"
    client.close()


@pytest.fixture
def sentinel_set(tmp_path) -> Iterator[redis_sentinel.SentinelSet]:
    """Master, replica and Sentinel on base+53..55; the master is declared down after 1 s."""
    found = redis_sentinel.start(tmp_path, HOST, SENTINEL_PORTS, down_after_ms=1000, failover_timeout_ms=5000)
    try:
        yield found
    finally:
        redis_sentinel.stop(found)


def _wait(done, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"no {what} after {timeout_s:.0f} s"
        time.sleep(0.2)


def test_the_sentinel_client_writes_to_the_promoted_replica_after_the_master_is_killed(sentinel_set):
    s = sentinel_set
    settings = RedisSettings(url=f"redis://{s.name}/0", mode="sentinel", sentinels=f"{HOST}:{s.sentinel.port}",
                             master_name=s.name)
    client = redis_io.client(settings)
    with redis_io.redis_errors("SET before the failover"):
        client.set("before", "1")
    assert direct(s.master.port).get("before") == b"1"
    _wait(lambda: direct(s.replica.port).get("before") == b"1", 10, "replication")
    os.kill(procs.read_pid(s.master), signal.SIGKILL)
    _wait(lambda: redis_sentinel.master_address(s) == (HOST, s.replica.port), 60, "promotion")
    with redis_io.redis_errors("SET after the failover"):
        client.set("after", "2")
        assert client.get("before") == b"1"
    promoted = direct(s.replica.port)
    assert promoted.get("after") == b"2" and promoted.info("replication")["role"] == "master"
    client.close()
