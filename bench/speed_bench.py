"""Speed layer benchmark: ceiling, end to end (1 and 2 workers), naive baseline, freshness, memory, Redis CPU.

Point it at a running Kafka and Redis (the settings, e.g. `.venv/bin/trends up` or TRENDS_* env),
then:
    .venv/bin/python bench/speed_bench.py --posts 100000 --fresh-rate 15000 --fresh-seconds 30
    .venv/bin/python bench/speed_bench.py --posts 100000 --against /tmp/old-checkout   # A/B only
    .venv/bin/python bench/speed_bench.py --posts 100000 --cluster                     # 3 masters vs one
Ours runs the partition state (the only one now); an `--against` checkout runs its
own default. Uses fresh topics, consumer groups and Redis database 15 (flushed; database 0 of a cluster
the bench starts itself), so it never touches live data.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlparse

import orjson
from kafka import TopicPartition
from kafka.record.util import crc32c_c
from speed_meters import (  # bench/ is on sys.path when this file runs as a script
    CpuMeter,
    NodeStats,
    RedisMeter,
    RssSampler,
    flush,
    key_memory,
    node_clients,
    redis_us,
    summed,
)

from adapters import kafka as kafka_io
from adapters import redis as redis_io
from speed import lean_records
from speed.merger import Merger
from speed.state import COMPACT_IDLE
from trendcore.cms import cell_indexes
from trendcore.events import format_time, parse_record
from trendcore.hashtags import tag_keys
from trendcore.keys import KeySpace
from trendcore.post_lists import right_sized
from trendcore.settings import Settings
from trendcore.windows import bucket_of
from trends.gen.model import GenConfig, Stream
from trends.gen.run import produce
from trends.stack import manager, procs, redis_cluster

TRENDS = str(Path(sys.executable).parent / "trends")  # the CLI of the venv running this bench
MARKER_REGION = "AQ"  # the generator never uses it: its sketch holds only the markers
STATE = "partition"  # what our workers run (the only state since the Lua path's removal)


def ours(base: Settings, partitions: int | None = None) -> Settings:
    """The settings with, when given, that many partitions a topic."""
    kafka = base.kafka.model_copy(update={"partitions": partitions or base.kafka.partitions})
    return base.model_copy(update={"kafka": kafka})


def lane(base: Settings, tag: str) -> Settings:
    """Fresh topics and group; Redis database 15 of a single server (a cluster has database 0 only)."""
    uid = f"{tag}-{uuid.uuid4().hex[:6]}"
    db = "0" if base.redis.mode == "cluster" else "15"
    return base.model_copy(update={
        "kafka": base.kafka.model_copy(update={"posts_topic": f"bench-posts-{uid}",
                                               "engagements_topic": f"bench-eng-{uid}",
                                               "dead_letter_topic": f"bench-dlq-{uid}"}),
        "redis": base.redis.model_copy(update={"url": base.redis.url.rsplit("/", 1)[0] + "/" + db}),
        "speed": base.speed.model_copy(update={"group": f"bench-{uid}"}),
    })


def with_group(s: Settings, group: str) -> Settings:
    return s.model_copy(update={"speed": s.speed.model_copy(update={"group": group})})


def env_of(s: Settings, port: int, code: str | None = None, **extra: str) -> dict[str, str]:
    """The environment of a worker or materializer of these settings; with `code` (another checkout) that
    code, in its own default `speed.state`."""
    env = {"TRENDS_KAFKA__BOOTSTRAP": s.kafka.bootstrap, "TRENDS_KAFKA__POSTS_TOPIC": s.kafka.posts_topic,
           "TRENDS_KAFKA__ENGAGEMENTS_TOPIC": s.kafka.engagements_topic,
           "TRENDS_KAFKA__DEAD_LETTER_TOPIC": s.kafka.dead_letter_topic,
           "TRENDS_KAFKA__PARTITIONS": str(s.kafka.partitions), "TRENDS_REDIS__URL": s.redis.url,
           "TRENDS_REDIS__MODE": s.redis.mode, "TRENDS_SPEED__GROUP": s.speed.group,
           "TRENDS_SPEED__METRICS_PORT": str(port), "TRENDS_SPEED__MATERIALIZER_PORT": str(port + 50)}
    env = {**os.environ, **env, **extra}
    env.pop("TRENDS_SPEED__STATE", None)  # an older checkout runs its own default
    if code:
        env["PYTHONPATH"] = code
    return env


def default_state(code: str) -> str:
    """The `speed.state` another checkout runs by default: `lua` before the setting existed, `partition` once the
    Lua path (speed/apply.lua) was removed with it."""
    fallback = "lua" if (Path(code) / "speed" / "apply.lua").exists() else "partition"
    probe = f"from trendcore.settings import Settings; print(getattr(Settings().speed, 'state', {fallback!r}))"
    env = {k: v for k, v in os.environ.items() if k != "TRENDS_SPEED__STATE"} | {"PYTHONPATH": code}
    # run in the checkout: `python -c` puts the working directory first on sys.path, ahead of PYTHONPATH
    return subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True,
                          cwd=code).stdout.strip()


def start(s: Settings, port: int, workers: int, materializer: bool = False, code: str | None = None,
          **extra: str) -> list[subprocess.Popen]:
    """`workers` speed workers (and the materializer) of these settings, output discarded."""
    env = env_of(s, port, code, **extra)
    argvs = [[TRENDS, "speed", "run", "--index", str(i)] for i in range(workers)]
    argvs += [[TRENDS, "speed", "materialize"]] if materializer else []
    return [subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for argv in argvs]


def stop(procs_: list[subprocess.Popen]) -> None:
    for p in procs_:
        p.terminate()
    for p in procs_:
        p.wait(timeout=30)


def broker_pids(s: Settings) -> list[int]:
    """The local broker's PID (the stack's PID file), none when Kafka is external or not ours."""
    if s.stack.infra == "external":
        return []
    pid = procs.read_pid(manager.components(s)["kafka"].service(s))
    return [pid] if pid and procs.pid_alive(pid) else []


def ends_of(s: Settings) -> dict[tuple[str, int], int]:
    k = s.kafka
    return {(t, p): o for t in (k.posts_topic, k.engagements_topic) for p, o in kafka_io.end_offsets(k, t).items()}


def offset_names(s: Settings, state: str, ends: dict[tuple[str, int], int]) -> list[str]:
    """Where the workers of `state` store each partition's next offset (`lua`: an older checkout's layout, from
    before that path was removed)."""
    keys = KeySpace.of(s)
    if state == "partition":
        return [keys.part_offset(p, t) for t, p in ends]
    return [f"{s.redis.key_prefix}offsets:{s.speed.group}:{t}:{p}" for t, p in ends]


def produce_all(s: Settings, records: list) -> None:
    """Every record to its topic, flushed."""
    producer = kafka_io.producer(s.kafka)
    topics = {"posts": s.kafka.posts_topic, "engagements": s.kafka.engagements_topic}
    for record in records:
        producer.send(topics[record.topic], record.key, record.value)
    producer.flush()


UNTUNED = {"max_poll_records": 20_000, "max_partition_fetch_bytes": 4 << 20, "fetch_max_bytes": 64 << 20}


def cpu_text(cpu: dict[str, float]) -> str:
    parts = ", ".join(f"{label} {us:.1f}" for label, us in cpu.items())
    return parts + f"; total {sum(cpu.values()):.1f} µs CPU a record"


def ceiling(s: Settings, total: int, options: dict[str, object], lean: bool = False) -> tuple[float, dict[str, float]]:
    """Raw kafka-python consume of both topics with these consumer options, no processing: records/s,
    and the CPU it cost a record (this process's consumer, the broker when it runs here); `lean`: with the
    workers' lean record decoding (speed/lean_records.py) instead of kafka-python's own."""
    k = s.kafka
    consumer = kafka_io.consumer(k, **options)
    if lean:
        lean_records.install(consumer)
    tps = [TopicPartition(t, p) for t in (k.posts_topic, k.engagements_topic) for p in range(k.partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning()
    seen, started, meter = 0, time.perf_counter(), CpuMeter({"kafka": broker_pids(s)})
    while seen < total:
        for records in consumer.poll(timeout_ms=500).values():
            seen += len(records)
    elapsed = time.perf_counter() - started
    cpu = meter.per_record_us(seen, own="consumer")
    consumer.close()
    return seen / elapsed, cpu


@dataclass
class Run:
    """One end-to-end run: seconds, CPU µs a record (workers, broker, Redis) and each Redis node's counters."""

    seconds: float
    cpu: dict[str, float]
    redis: list[NodeStats]


def end_to_end(s: Settings, workers: int, port: int, code: str | None = None, state: str = STATE,
               settle_s: float = 0.0) -> Run:
    """Seconds from the group's first assignment (epoch key set) to every offset stored, and the CPU
    each local component spent a record meanwhile; `code`, a checkout of other code (git worktree),
    runs that code's workers instead of ours, in its `state`. The workers run `settle_s` more before
    they stop (idle checkpoints: what a running layer holds)."""
    client = redis_io.client(s.redis)
    flush(s)
    ends = ends_of(s)
    names = offset_names(s, state, ends)
    keys = KeySpace.of(s)
    running = start(s, port, workers, code=code)
    try:
        deadline = time.monotonic() + 600
        while not client.exists(keys.epoch(s.speed.group)):
            time.sleep(0.01)
        started = time.perf_counter()
        meter, redis_meter = CpuMeter({"workers": [p.pid for p in running], "kafka": broker_pids(s)}), RedisMeter(s)
        while time.monotonic() < deadline:
            stored = [int(v or 0) for v in redis_io.mget(client, names)]
            if stored == list(ends.values()):
                elapsed, records = time.perf_counter() - started, sum(ends.values())
                nodes = redis_meter.since()
                cpu = meter.per_record_us(records) | {"redis": redis_us(nodes, records)}
                redis_meter.close()
                time.sleep(settle_s)
                return Run(elapsed, cpu, nodes)
            time.sleep(0.02)
        raise SystemExit("end to end did not finish in 600 s")
    finally:
        stop(running)
        client.close()


@dataclass
class MergeCost:
    """One merge of everything the partitions hold (the merger of a fresh materializer)."""

    seconds: float
    own_cpu_s: float
    redis: list[NodeStats]
    written: int


def merge_once(s: Settings) -> MergeCost:
    """Run the merger once in this process (it merges every live key: a fresh process's first run)."""
    client = redis_io.client(s.redis)
    meter, started, cpu = RedisMeter(s), time.perf_counter(), time.process_time()
    written = Merger(client, KeySpace.of(s), s).run(int(time.time() * 1000))
    cost = MergeCost(time.perf_counter() - started, time.process_time() - cpu, meter.since(), written)
    meter.close()
    client.close()
    return cost


def node_stats(s: Settings) -> list[NodeStats]:
    nodes = node_clients(s)
    found = [NodeStats.of(n) for n in nodes]
    for n in nodes:
        n.close()
    return found


def naive(s: Settings, stream_values: list[bytes], limit: int) -> float:
    """One Redis round trip per mention (BITFIELD on the four sketches of the mention): mentions/s."""
    client = redis_io.client(s.redis)
    flush(s)
    shape, keys = s.sketch.shape, KeySpace.of(s)
    now = int(time.time() * 1000)
    done, started = 0, time.perf_counter()
    for raw in stream_values:
        post = parse_record(raw, "post", now)
        for tag, _ in tag_keys(post.text):
            cells = cell_indexes(tag, shape)
            pipe = client.pipeline(transaction=True)
            for region in (post.region, "all"):
                for unit in ("m", "h"):
                    args = [x for c in cells for x in ("INCRBY", "u32", f"#{c}", 1)]
                    name = keys.cms(region, unit, bucket_of(post.created_at_ms, unit))
                    pipe.execute_command("BITFIELD", name, "OVERFLOW", "SAT", *args)
            pipe.execute()
            done += 1
        if done >= limit:
            break
    return done / (time.perf_counter() - started)


GRACE_S = 8.0  # after the stream, how long the last markers get to become visible (plus one snapshot period)


class Pregenerated:
    """A generator's records made in advance, replayed by `produce` as if generated on the fly."""

    def __init__(self, stream: Stream, posts: int) -> None:
        # right-sized: orjson's 4 KiB buffers would make 1.5 million records (300 s at 5,000 posts/s) 6 GB
        self.rows = [replace(r, value=right_sized(r.value)) for r in stream.records(posts)]

    def records(self, count: int | None = None):
        return iter(self.rows)


@dataclass
class Freshness:
    """Marker latencies (s), markers never visible, the posts/s produced, and the µs a record the Redis
    server and our processes spent while the stream was produced (merges and snapshots included)."""

    latencies: list[float]
    unseen: int
    posts_per_s: float
    cpu: dict[str, float]
    commands_us: dict[str, float]  # command time a record, per Redis command
    rss: dict[str, list[int]]  # kB at each fifth of the stream, then the peak (RssSampler.series)


def freshness(base: Settings, rate: float, seconds: float, port: int, every_s: float,
              workers: int = 2) -> Freshness:
    """Markers produced at a steady rate of posts: produce -> checkpointed -> merged -> first snapshot
    computed after (the materializer reads the merged keys, so the merge is inside the figure); also how
    many markers were never visible (the workers fell behind the rate)."""
    s = lane(base, "fresh")
    kafka_io.ensure_topics(s.kafka)
    client = redis_io.client(s.redis)
    flush(s)
    running = start(s, port, workers, materializer=True, TRENDS_SPEED__MATERIALIZE_EVERY_S=str(every_s))
    snapshots: list[tuple[float, int]] = []  # (seen at, window total of the marker region)
    markers: list[float] = []
    stop_watching, stop_marking = threading.Event(), threading.Event()

    def watch() -> None:
        last = None
        while not stop_watching.is_set():
            raw = client.get(KeySpace.of(s).trending(MARKER_REGION, "1h", "volume"))
            if raw:
                doc = orjson.loads(raw)
                if doc["computed_at_ms"] != last:
                    snapshots.append((time.time(), doc["total"]))
                    last = doc["computed_at_ms"]
            time.sleep(0.02)

    def mark() -> None:
        producer = kafka_io.producer(s.kafka, **{"linger.ms": 0})
        i = 0
        while not stop_marking.is_set():
            value = orjson.dumps({"v": 1, "type": "post", "post_id": f"m{i}", "user_id": "bench",
                                  "region": MARKER_REGION, "text": "#freshness",
                                  "created_at": format_time(int(time.time() * 1000))})
            sent = time.time()
            producer.send(s.kafka.posts_topic, b"marker", value)  # one key: one partition, in order
            producer.flush()
            markers.append(sent)
            i += 1
            time.sleep(0.2)

    try:
        # generated before the clock starts: the run measures the workers, without a generator
        # competing with them for the same cores
        now = int(time.time() * 1000)
        stream = Pregenerated(Stream(GenConfig(seed=5, start_ms=now, event_rate=rate, wall_now_ms=now,
                                               engagements_per_post=0.5)), int(rate * seconds))
        threads = [threading.Thread(target=f, daemon=True) for f in (watch, mark)]
        for t in threads:
            t.start()
        roles = {"workers": [p.pid for p in running[:-1]], "materializer": [running[-1].pid]}
        meter = CpuMeter(roles | {"kafka": broker_pids(s)})
        redis_meter = RedisMeter(s)
        with RssSampler(roles) as rss:
            result = produce(stream, s, duration_s=seconds, rate=rate)
        cpu = meter.per_record_us(result.records) | {"redis": redis_us(redis_meter.since(), result.records)}
        commands = {c: u / result.records for c, u in redis_meter.command_usec_since().items()}
        redis_meter.close()
        stop_marking.set()  # the last markers get as long as the others to become visible
        time.sleep(every_s + GRACE_S)
        stop_watching.set()
        for t in threads:
            t.join(timeout=5)
    finally:
        stop(running)
    latencies, unseen = [], 0
    for i, sent in enumerate(markers[5:], start=5):
        visible = [seen for seen, total in snapshots if total >= i + 1]
        if visible:
            latencies.append(min(visible) - sent)
        else:
            unseen += 1
    fifths = rss.series([seconds * k / 5 for k in range(1, 6)])
    return Freshness(latencies, unseen, result.posts_per_s, cpu, commands, fifths)


SPAN_S = 50  # the memory streams' posts all fall in one minute, every size in the same buckets


@dataclass
class MemoryPoint:
    """Redis after a stream of `posts`, consumed and merged: used_memory above the flushed database, and
    the key families (keys, bytes, largest)."""

    posts: int
    records: int
    used: int
    families: dict[str, tuple[int, int, int]]


def memory_point(base: Settings, posts: int, start_ms: int, port: int) -> MemoryPoint:
    """A fresh lane: `posts` posts (with engagements) from `start_ms` over SPAN_S, 2 workers to the end and
    a few idle checkpoints after, one merge, then used_memory and MEMORY USAGE by key family."""
    s = lane(base, f"mem{posts}")
    kafka_io.ensure_topics(s.kafka)
    now = int(time.time() * 1000)
    stream = Stream(GenConfig(seed=7, start_ms=start_ms, event_rate=posts / SPAN_S, wall_now_ms=now,
                              late_share=0.0))  # no late records: buckets depend on time, not on posts
    records = list(stream.records(posts))
    produce_all(s, records)
    flush(s)
    empty = sum(n.used_memory for n in node_stats(s))
    # buckets that stopped changing are written whole after COMPACT_IDLE checkpoints: what a running layer holds
    end_to_end(s, 2, port, settle_s=(COMPACT_IDLE + 3) * s.speed.flush_every_s)
    merge_once(s)
    used = sum(n.used_memory for n in node_stats(s)) - empty
    return MemoryPoint(posts, len(records), used, summed(key_memory(s)))


def memory_growth(base: Settings, sizes: list[int], port: int) -> list[MemoryPoint]:
    """A memory point per stream size, every stream in the same minute, and what grows with posts."""
    start_ms = (int(time.time()) // 60 - 1) * 60_000 + 5_000  # the last whole minute
    points = [memory_point(base, n, start_ms, port) for n in sizes]
    print("memory (partition state), used_memory above the empty database after each stream, consumed by 2 "
          "workers and merged once:")
    for p in points:
        print(f"  {p.posts:>9,} posts ({p.records:,} records): {p.used / 1e6:,.2f} MB")
    first, last = points[0], points[-1]
    slope = (last.used - first.used) / (last.posts - first.posts)
    print(f"  growth with posts: {slope:,.1f} B a post (used_memory, {first.posts:,} -> {last.posts:,}); "
          f"fixed part {(first.used - slope * first.posts) / 1e6:,.2f} MB")
    print(f"  by key family (MEMORY USAGE), {first.posts:,} -> {last.posts:,} posts:")
    for kind in sorted(first.families.keys() | last.families.keys()):
        a, b = first.families.get(kind, (0, 0, 0)), last.families.get(kind, (0, 0, 0))
        grow = (b[1] - a[1]) / (last.posts - first.posts)
        print(f"    {kind:14s} {a[0]:>7,} -> {b[0]:>7,} keys, {a[1] / 1e6:>8.2f} -> {b[1] / 1e6:>8.2f} MB "
              f"({grow:,.1f} B a post; largest {b[2]:,} B)")
    return points


def main() -> None:
    args = arguments()
    print("load average at start: %.2f %.2f %.2f" % os.getloadavg())
    base = ours(Settings(), args.partitions)
    parts = {"freshness"} if args.only_freshness else set(args.parts.split(","))
    if args.against or args.cluster or "throughput" in parts:
        throughput(base, args)
        if args.against or args.cluster:
            return
    if "memory" in parts and args.memory_posts:
        points = memory_growth(base, [int(n) for n in args.memory_posts.split(",")], args.port)
        report_sketches(base, points[0])
    if "freshness" in parts:
        report_freshness(base, args)
    print("load average at end: %.2f %.2f %.2f" % os.getloadavg())


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--posts", type=int, default=100_000)
    parser.add_argument("--parts", default="throughput,memory,freshness",
                        help="what to run, comma separated: throughput (ceiling, 1 and 2 workers, merger, naive), "
                             "memory, freshness")
    parser.add_argument("--memory-posts", default="100000,300000",
                        help="stream sizes of the memory growth (posts, comma separated; empty: skip it)")
    parser.add_argument("--fresh-rate", type=float, default=3000)
    parser.add_argument("--fresh-seconds", type=float, default=30)
    parser.add_argument("--every", type=float, default=2.0, help="materialize_every_s during the freshness run")
    parser.add_argument("--fresh-workers", type=int, default=2, help="workers during the freshness run")
    parser.add_argument("--port", type=int, default=9300, help="first metrics port of the bench's workers")
    parser.add_argument("--partitions", type=int, help="partitions of the bench's topics (default: the settings')")
    parser.add_argument("--only-freshness", action="store_true", help="the same as --parts freshness")
    parser.add_argument("--against", metavar="CHECKOUT", help="only A/B: ours vs this checkout's, interleaved")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the --against A/B and of --cluster")
    parser.add_argument("--ab-workers", default="1,2", help="worker counts per side in the --against A/B")
    parser.add_argument("--cluster", action="store_true",
                        help="only throughput and spread: a local 3-master Redis Cluster (started and stopped "
                             "by the bench through the stack) against the single server")
    parser.add_argument("--cluster-ports", default="",
                        help="ports of the cluster's masters (default: the stack's setting, else the Redis port "
                             "+ 101..103)")
    return parser.parse_args()


def throughput(base: Settings, args) -> None:
    """One stream of `--posts`: the consume ceiling, then the A/B, the cluster comparison, or 1 and 2 workers
    end to end with the merger's share and the naive baseline."""
    s = lane(base, "e2e")
    kafka_io.ensure_topics(s.kafka)
    now = int(time.time() * 1000)
    stream = Stream(GenConfig(seed=3, start_ms=now - args.posts, event_rate=1000, wall_now_ms=now, late_max_s=1800))
    records = list(stream.records(args.posts))
    produce_all(s, records)
    total = len(records)
    mentions = sum(stream.truth.mentions.values())
    print(f"stream: {args.posts:,} posts, {total:,} records, {mentions:,} mentions, "
          f"{len({k[0] for k in stream.truth.mentions}):,} distinct tags, {s.kafka.partitions} partitions a topic")
    print(f"crc32c: {'C (crc32c package)' if crc32c_c is not None else 'pure Python'}, check_crcs={s.speed.check_crcs}")
    print(f"ours: partition state, flush_every_s={s.speed.flush_every_s}")
    ceil, ceil_cpu = ceiling(s, total, s.speed.consumer_tuning())
    print(f"ceiling (raw kafka-python consume): {ceil:,.0f} records/s with the workers' fetch options "
          f"{s.speed.consumer_tuning()}")
    print(f"  CPU of the ceiling: {cpu_text(ceil_cpu)}")
    lean, lean_cpu = ceiling(s, total, s.speed.consumer_tuning(), lean=True)
    print(f"  the same loop with the workers' lean record decoding: {lean:,.0f} records/s ({cpu_text(lean_cpu)}); "
          f"the aims compare with the raw kafka-python ceiling above")
    if args.against:
        return compare(s, total, ceil, args.against, args.rounds, args.port,
                       [int(w) for w in args.ab_workers.split(",")])
    if args.cluster:
        return compare_cluster(s, total, args)
    untuned, _ = ceiling(s, total, UNTUNED)
    print(f"  {untuned:,.0f} records/s with the old fetch options {UNTUNED}")
    for workers in (1, 2):
        s_w = with_group(s, f"{s.speed.group}-w{workers}")
        run = end_to_end(s_w, workers, args.port)
        print(f"end to end, {workers} worker(s): {total / run.seconds:,.0f} records/s "
              f"({total / run.seconds / ceil:.0%} of ceiling), "
              f"{mentions / run.seconds:,.0f} mentions/s, {args.posts / run.seconds:,.0f} posts/s")
        print(f"  CPU: {cpu_text(run.cpu)}")
        if workers == 1:
            ours_rate = mentions / run.seconds
            report_merge(merge_once(s_w), total)
        else:
            two_workers_us = sum(run.cpu.values())
    budget = os.cpu_count() / (0.8 * ceil) * 1e6
    print(f"80% of the ceiling on {os.cpu_count()} cores leaves {budget:.1f} µs of CPU a record for everything "
          f"(consume, broker, worker, Redis); the 2-worker run spent {two_workers_us:.1f}")
    posts_only = [r.value for r in records if r.topic == "posts" and r.kind == "post"]
    base_rate = naive(s, posts_only, 20_000)
    print(f"naive (one round trip per mention): {base_rate:,.0f} mentions/s; 1 worker is {ours_rate / base_rate:.1f}x")


def report_merge(cost: MergeCost, records: int) -> None:
    """The merger's share: one merge of the whole state a run left, per record of that run."""
    print(f"  merger, once over the whole state ({cost.written:,} buckets and tag-hours): {cost.seconds:.2f} s, "
          f"Redis {redis_us(cost.redis, records):.2f} µs a record of the run, merger process "
          f"{cost.own_cpu_s / records * 1e6:.2f} µs a record")


def report_sketches(s: Settings, point: MemoryPoint) -> None:
    shape = s.sketch.shape
    largest = point.families.get("cms", (0, 0, shape.nbytes))[2]
    print(f"  one sketch {shape.width}x{shape.depth} = {shape.nbytes:,} B counters; merged sketches for 10 regions + "
          f"all, 60 minutes + 25 hours: {11 * (60 + 25) * largest / 1e6:.1f} MB, and as much again per partition "
          "holding those buckets (whatever the tag count)")


def compare(s: Settings, total: int, ceil: float, other: str, rounds: int, port: int, counts: list[int]) -> None:
    """Ours and the other checkout's (in its default state), alternating per round on the same records,
    for each worker count: records/s, share of this run's ceiling, Redis and worker CPU a record."""
    states = {"ours": STATE, other: default_state(other)}
    runs: dict[tuple[str, int], list[Run]] = {}
    for n in range(rounds):
        for workers in counts:
            for side, name in enumerate(states):
                lane_s = with_group(s, f"{s.speed.group}-r{n}-{side}-w{workers}")  # fresh: reads every record
                run = end_to_end(lane_s, workers, port, None if name == "ours" else other, states[name])
                runs.setdefault((name, workers), []).append(run)
                print(f"round {n + 1}: {name} ({states[name]}), {workers} worker(s): {total / run.seconds:,.0f} "
                      f"records/s; {cpu_text(run.cpu)} (load {os.getloadavg()[0]:.2f})", flush=True)
    for (name, workers), found in runs.items():
        rate = statistics.median(total / r.seconds for r in found)
        print(f"median {name} ({states[name]}), {workers} worker(s): {rate:,.0f} records/s ({rate / ceil:.0%} of "
              f"the ceiling), Redis {statistics.median(r.cpu['redis'] for r in found):.1f} µs a record, workers "
              f"{statistics.median(r.cpu['workers'] for r in found):.1f} µs a record, over "
              f"{[round(total / r.seconds) for r in found]}")
    print("load average at end: %.2f %.2f %.2f" % os.getloadavg())


def on_cluster(s: Settings, ports: list[int]) -> Settings:
    """The same lane on a local Redis Cluster of these masters (database 0), in cluster mode."""
    host = urlparse(s.redis.url).hostname
    return s.model_copy(update={
        "stack": s.stack.model_copy(update={"redis_cluster_ports": ports}),
        "redis": s.redis.model_copy(update={"url": f"redis://{host}:{ports[0]}/0", "mode": "cluster"}),
    })


@contextmanager
def cluster_running(own: Settings):
    """The stack's cluster nodes started (a new cluster: the nodes.conf of an earlier one removed), then stopped."""
    names = redis_cluster.names(own)
    nodes = [manager.components(own)[n].service(own) for n in names]
    if all(procs.state(node) == "stopped" for node in nodes):
        shutil.rmtree(own.stack.home / "redis-cluster", ignore_errors=True)
    manager.up(own, names=names, log=lambda _m: None)
    try:
        yield own
    finally:
        manager.down(own, names=names, log=lambda _m: None)


def cluster_ports(s: Settings, text: str) -> list[int]:
    if text:
        return [int(p) for p in text.split(",")]
    port = urlparse(s.redis.url).port or 6379
    return list(s.stack.redis_cluster_ports or [port + 101, port + 102, port + 103])


def compare_cluster(s: Settings, total: int, args) -> None:
    """2 workers on the single server and on the cluster, alternating; then each master's share of the speed
    keys' memory and of the commands of the last cluster run and its merge."""
    own = on_cluster(s, cluster_ports(s, args.cluster_ports))
    rates: dict[str, list[float]] = {"single": [], "cluster": []}
    with cluster_running(own):
        for n in range(args.rounds):
            for name, lane_s in (("single", s), ("cluster", own)):
                lane_s = with_group(lane_s, f"{s.speed.group}-c{n}-{name}")
                if name == "cluster":
                    flush(lane_s)
                    empty = node_stats(lane_s)
                run = end_to_end(lane_s, 2, args.port)
                rates[name].append(total / run.seconds)
                print(f"round {n + 1}: {name}, 2 workers: {total / run.seconds:,.0f} records/s; {cpu_text(run.cpu)} "
                      f"(load {os.getloadavg()[0]:.2f})", flush=True)
        merge = merge_once(lane_s)
        used = [after.used_memory - before.used_memory for after, before in zip(node_stats(lane_s), empty, strict=True)]
        report_spread(own, run, merge, used, key_memory(lane_s))
    single, clustered = statistics.median(rates["single"]), statistics.median(rates["cluster"])
    print(f"median: single {single:,.0f}, cluster {clustered:,.0f} records/s ({clustered / single - 1:+.0%}); "
          f"partitions a topic {s.kafka.partitions}")
    print("load average at end: %.2f %.2f %.2f" % os.getloadavg())


def report_spread(own: Settings, run: Run, merge: MergeCost, used: list[int],
                  families: list[dict[str, tuple[int, int, int]]]) -> None:
    """Each master's share of the speed keys (MEMORY USAGE, used_memory growth) and of the commands and
    their time (INFO commandstats) during the last cluster run and its merge."""
    ports = own.stack.redis_cluster_ports or []
    calls = [a.calls + b.calls for a, b in zip(run.redis, merge.redis, strict=True)]
    usec = [a.usec + b.usec for a, b in zip(run.redis, merge.redis, strict=True)]
    keyed = [sum(size for _, size, _ in f.values()) for f in families]
    for i, port in enumerate(ports):
        print(f"  master :{port}: speed keys {keyed[i] / 1e6:.2f} MB ({keyed[i] / sum(keyed):.0%}), used_memory "
              f"+{used[i] / 1e6:.2f} MB ({used[i] / sum(used):.0%}), commands {calls[i]:,} "
              f"({calls[i] / sum(calls):.0%}), command time {usec[i] / 1e6:.2f} s ({usec[i] / sum(usec):.0%}), "
              f"partition keys {families[i].get('part:cms', (0, 0, 0))[0]:,} sketches")


def report_freshness(base: Settings, args) -> None:
    found = freshness(base, args.fresh_rate, args.fresh_seconds, args.port + 10, args.every, args.fresh_workers)
    lat = sorted(found.latencies)
    if lat:
        p50, p99 = statistics.median(lat), lat[min(len(lat) - 1, int(0.99 * len(lat)))]
        print(f"freshness at {found.posts_per_s:,.0f} posts/s ({args.fresh_workers} workers, partition state, "
              f"flush every {base.speed.flush_every_s} s, materialize and merge every {args.every} s, "
              f"{len(lat)} markers): p50 {p50:.2f} s, p99 {p99:.2f} s, max {lat[-1]:.2f} s")
    print(f"  CPU while producing: {cpu_text(found.cpu)}")
    for role, (*fifths, peak) in found.rss.items():
        print(f"  resident memory of the {role} at each fifth of the stream: "
              f"{' / '.join(f'{kb / 1024:,.0f}' for kb in fifths)} MB (peak {peak / 1024:,.0f}; "
              f"{(fifths[-1] - fifths[0]) / max(fifths[0], 1):+.1%} after the first fifth)")
    top = ", ".join(f"{cmd} {us:.2f}" for cmd, us in list(found.commands_us.items())[:8])
    print(f"  Redis command time, µs a record (evalsha: the checkpoints and the merger's takes, with the commands "
          f"they run, which also count in their own lines): {top}")
    if found.unseen:
        print(f"freshness: {found.unseen} of {len(lat) + found.unseen} markers were not visible "
              f"{args.every + GRACE_S:.0f} s after the stream ended "
              "(the workers fell behind the rate; p50/p99 above cover the visible ones only)")
    elif not lat:
        print("freshness: no marker became visible")


if __name__ == "__main__":
    sys.exit(main())
