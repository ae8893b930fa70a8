"""Speed layer benchmark: ceiling, end to end (1 and 2 workers), naive baseline, freshness, memory.

Point it at a running Kafka and Redis (the settings, e.g. `.venv/bin/trends up` or TRENDS_* env),
then:
    .venv/bin/python bench/speed_bench.py --posts 100000 --fresh-rate 3000 --fresh-seconds 30
Uses fresh topics, consumer groups and Redis database 15 (flushed), so it never touches live data.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import orjson
from kafka import TopicPartition
from kafka.record.util import crc32c_c
from stack_cpu import cpu_seconds_since, cpu_ticks  # bench/ is on sys.path when this file runs as a script

from adapters import kafka as kafka_io
from adapters import redis as redis_io
from trendcore.cms import cell_indexes
from trendcore.events import format_time, parse_record
from trendcore.hashtags import tag_keys
from trendcore.keys import KeySpace
from trendcore.settings import Settings
from trendcore.windows import bucket_of
from trends.gen.model import GenConfig, Stream
from trends.gen.run import produce

TRENDS = str(Path(sys.executable).parent / "trends")  # the CLI of the venv running this bench
MARKER_REGION = "AQ"  # the generator never uses it: its sketch holds only the markers


def lane(base: Settings, tag: str) -> Settings:
    """Fresh topics and group, Redis DB 15."""
    uid = f"{tag}-{uuid.uuid4().hex[:6]}"
    return base.model_copy(update={
        "kafka": base.kafka.model_copy(update={"posts_topic": f"bench-posts-{uid}",
                                               "engagements_topic": f"bench-eng-{uid}",
                                               "dead_letter_topic": f"bench-dlq-{uid}"}),
        "redis": base.redis.model_copy(update={"url": base.redis.url.rsplit("/", 1)[0] + "/15"}),
        "speed": base.speed.model_copy(update={"group": f"bench-{uid}"}),
    })


def env_of(s: Settings, port: int, **extra: str) -> dict[str, str]:
    env = {"TRENDS_KAFKA__BOOTSTRAP": s.kafka.bootstrap, "TRENDS_KAFKA__POSTS_TOPIC": s.kafka.posts_topic,
           "TRENDS_KAFKA__ENGAGEMENTS_TOPIC": s.kafka.engagements_topic,
           "TRENDS_KAFKA__DEAD_LETTER_TOPIC": s.kafka.dead_letter_topic, "TRENDS_REDIS__URL": s.redis.url,
           "TRENDS_SPEED__GROUP": s.speed.group, "TRENDS_SPEED__METRICS_PORT": str(port),
           "TRENDS_SPEED__MATERIALIZER_PORT": str(port + 50)}
    env.update(extra)
    return {**os.environ, **env}


def ends_of(s: Settings) -> dict[tuple[str, int], int]:
    k = s.kafka
    return {(t, p): o for t in (k.posts_topic, k.engagements_topic) for p, o in kafka_io.end_offsets(k, t).items()}


UNTUNED = {"max_poll_records": 20_000, "max_partition_fetch_bytes": 4 << 20, "fetch_max_bytes": 64 << 20}


class CpuMeter:
    """CPU time a record of local components over a run (from /proc, bench/stack_cpu.py), and of
    this process itself (the ceiling's consumer), from its own process time."""

    def __init__(self) -> None:
        self.ticks, self.own = cpu_ticks(), time.process_time()

    def per_record_us(self, records: int, own: str | None = None, **components: str) -> dict[str, float]:
        """µs of CPU a record: `own` labels this process; `components` maps labels to stack_cpu names."""
        spent = cpu_seconds_since(self.ticks)
        seconds = {label: spent[name] for label, name in components.items()}
        if own:
            seconds = {own: time.process_time() - self.own} | seconds
        return {label: s / records * 1e6 for label, s in seconds.items()}


def cpu_text(cpu: dict[str, float]) -> str:
    parts = ", ".join(f"{label} {us:.1f}" for label, us in cpu.items())
    return parts + f"; total {sum(cpu.values()):.1f} µs CPU a record"


def ceiling(s: Settings, total: int, options: dict[str, object]) -> tuple[float, dict[str, float]]:
    """Raw kafka-python consume of both topics with these consumer options, no processing: records/s,
    and the CPU it cost a record (this process's consumer, the broker when it runs here)."""
    k = s.kafka
    consumer = kafka_io.consumer(k, **options)
    tps = [TopicPartition(t, p) for t in (k.posts_topic, k.engagements_topic) for p in range(k.partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning()
    seen, started, meter = 0, time.perf_counter(), CpuMeter()
    while seen < total:
        for records in consumer.poll(timeout_ms=500).values():
            seen += len(records)
    elapsed = time.perf_counter() - started
    cpu = meter.per_record_us(seen, own="consumer", kafka="kafka")
    consumer.close()
    return seen / elapsed, cpu


def end_to_end(s: Settings, workers: int, port: int, code: str | None = None) -> tuple[float, dict[str, float]]:
    """Seconds from the group's first assignment (epoch key set) to every offset stored, and the CPU
    each local component spent a record meanwhile; `code`, a checkout of other code (git worktree),
    runs that code's workers instead of ours."""
    client = redis_io.client(s.redis)
    client.flushdb()
    ends = ends_of(s)
    keys = KeySpace.of(s.redis)
    names = [keys.offset(s.speed.group, t, p) for t, p in ends]
    extra = {"PYTHONPATH": code} if code else {}
    procs = [subprocess.Popen([TRENDS, "speed", "run", "--index", str(i)], env=env_of(s, port, **extra),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(workers)]
    try:
        deadline = time.monotonic() + 600
        while not client.exists(keys.epoch(s.speed.group)):
            time.sleep(0.01)
        started, meter = time.perf_counter(), CpuMeter()
        while time.monotonic() < deadline:
            stored = [int(v or 0) for v in client.mget(names)]
            if stored == list(ends.values()):
                elapsed = time.perf_counter() - started
                return elapsed, meter.per_record_us(sum(ends.values()), workers="speed workers", redis="redis",
                                                    kafka="kafka")
            time.sleep(0.02)
        raise SystemExit("end to end did not finish in 600 s")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)


def naive(s: Settings, stream_values: list[bytes], limit: int) -> float:
    """One Redis round trip per mention (BITFIELD on the four sketches of the mention): mentions/s."""
    client = redis_io.client(s.redis)
    client.flushdb()
    shape, keys = s.sketch.shape, KeySpace.of(s.redis)
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
        self.rows = list(stream.records(posts))

    def records(self, count: int | None = None):
        return iter(self.rows)


def freshness(base: Settings, rate: float, seconds: float, port: int, every_s: float,
              workers: int = 2) -> tuple[list[float], int, float]:
    """Markers produced at a steady rate of posts: produce -> applied -> first snapshot computed after;
    also how many markers were never visible (the workers fell behind the rate)."""
    s = lane(base, "fresh")
    kafka_io.ensure_topics(s.kafka)
    client = redis_io.client(s.redis)
    client.flushdb()
    extra = {"TRENDS_SPEED__MATERIALIZE_EVERY_S": str(every_s)}
    procs = [subprocess.Popen([TRENDS, "speed", "run", "--index", str(i)], env=env_of(s, port, **extra),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(workers)]
    procs.append(subprocess.Popen([TRENDS, "speed", "materialize"], env=env_of(s, port, **extra),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    snapshots: list[tuple[float, int]] = []  # (seen at, window total of the marker region)
    markers: list[float] = []
    stop, stop_marking = threading.Event(), threading.Event()

    def watch() -> None:
        last = None
        while not stop.is_set():
            raw = client.get(KeySpace.of(s.redis).trending(MARKER_REGION, "1h", "volume"))
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
        result = produce(stream, s, duration_s=seconds, rate=rate)
        stop_marking.set()  # the last markers get as long as the others to become visible
        time.sleep(every_s + GRACE_S)
        stop.set()
        for t in threads:
            t.join(timeout=5)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
    latencies, unseen = [], 0
    for i, sent in enumerate(markers[5:], start=5):
        visible = [seen for seen, total in snapshots if total >= i + 1]
        if visible:
            latencies.append(min(visible) - sent)
        else:
            unseen += 1
    return latencies, unseen, result.posts_per_s


def memory(s: Settings) -> dict[str, float]:
    client, keys = redis_io.client(s.redis), KeySpace.of(s.redis)
    sizes: dict[str, list[int]] = {}
    for name in client.scan_iter(match=keys.match("*"), count=5000):
        kind = name.decode().removeprefix(keys.prefix).split(":")[0]
        sizes.setdefault(kind, []).append(int(client.memory_usage(name) or 0))
    return {k: (len(v), sum(v), max(v)) for k, v in sizes.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--posts", type=int, default=100_000)
    parser.add_argument("--fresh-rate", type=float, default=3000)
    parser.add_argument("--fresh-seconds", type=float, default=30)
    parser.add_argument("--every", type=float, default=2.0, help="materialize_every_s during the freshness run")
    parser.add_argument("--fresh-workers", type=int, default=2, help="workers during the freshness run")
    parser.add_argument("--port", type=int, default=9300)
    parser.add_argument("--only-freshness", action="store_true", help="skip throughput and memory")
    parser.add_argument("--against", metavar="CHECKOUT", help="only A/B: ours vs this checkout's, interleaved")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the --against A/B")
    parser.add_argument("--ab-workers", type=int, default=1, help="workers per side in the --against A/B")
    args = parser.parse_args()
    print("load average at start: %.2f %.2f %.2f" % os.getloadavg())
    base = Settings()
    if args.only_freshness:
        return report_freshness(base, args)
    s = lane(base, "e2e")
    kafka_io.ensure_topics(s.kafka)
    now = int(time.time() * 1000)
    stream = Stream(GenConfig(seed=3, start_ms=now - args.posts, event_rate=1000, wall_now_ms=now, late_max_s=1800))
    records = list(stream.records(args.posts))
    producer = kafka_io.producer(s.kafka)
    topics = {"posts": s.kafka.posts_topic, "engagements": s.kafka.engagements_topic}
    for record in records:
        producer.send(topics[record.topic], record.key, record.value)
    producer.flush()
    total = len(records)
    mentions = sum(stream.truth.mentions.values())
    print(f"stream: {args.posts:,} posts, {total:,} records, {mentions:,} mentions, "
          f"{len({k[0] for k in stream.truth.mentions}):,} distinct tags")
    print(f"crc32c: {'C (crc32c package)' if crc32c_c is not None else 'pure Python'}, check_crcs={s.speed.check_crcs}")
    if args.against:
        return compare(s, total, args.against, args.rounds, args.port, args.ab_workers)
    untuned, _ = ceiling(s, total, UNTUNED)
    ceil, ceil_cpu = ceiling(s, total, s.speed.consumer_tuning())
    print(f"ceiling (raw kafka-python consume): {ceil:,.0f} records/s with the workers' fetch options "
          f"{s.speed.consumer_tuning()}; {untuned:,.0f} records/s with the old ones {UNTUNED}")
    print(f"  CPU of the ceiling: {cpu_text(ceil_cpu)}")
    for workers in (1, 2):
        s_w = s.model_copy(update={"speed": s.speed.model_copy(update={"group": f"{s.speed.group}-w{workers}"})})
        seconds, cpu = end_to_end(s_w, workers, args.port)
        print(f"end to end, {workers} worker(s): {total / seconds:,.0f} records/s "
              f"({total / seconds / ceil:.0%} of ceiling), "
              f"{mentions / seconds:,.0f} mentions/s, {args.posts / seconds:,.0f} posts/s")
        print(f"  CPU: {cpu_text(cpu)}")
        if workers == 1:
            ours = mentions / seconds
            mem = memory(s_w)
        else:
            two_workers_us = sum(cpu.values())
    budget = os.cpu_count() / (0.8 * ceil) * 1e6
    print(f"80% of the ceiling on {os.cpu_count()} cores leaves {budget:.1f} µs of CPU a record for everything "
          f"(consume, broker, worker, Redis); the 2-worker run spent {two_workers_us:.1f}")
    posts_only = [r.value for r in records if r.topic == "posts" and r.kind == "post"]
    base_rate = naive(s, posts_only, 20_000)
    print(f"naive (one round trip per mention): {base_rate:,.0f} mentions/s; 1 worker is {ours / base_rate:.1f}x")
    need = 20 * base_rate * total / mentions
    print(f"  20x naive is {20 * base_rate:,.0f} mentions/s: {need:,.0f} records/s at this stream's "
          f"{mentions / total:.2f} mentions a record, {need / ceil:.0%} of the ceiling")
    shape = s.sketch.shape
    print(f"memory: one sketch {shape.width}x{shape.depth} = {shape.nbytes:,} B counters; "
          "by key kind after the 1-worker run:")
    for kind, (n, size, biggest) in sorted(mem.items()):
        print(f"  {kind:10s} {n:>8,} keys {size / 1e6:>9.2f} MB (largest {biggest:,} B)")
    sketch_total = 11 * (60 + 25) * mem["cms"][2]
    print(f"  sketches for 10 regions + all, 60 minutes + 25 hours: {sketch_total / 1e6:.1f} MB "
          "(whatever the tag count)")
    report_freshness(base, args)
    print("load average at end: %.2f %.2f %.2f" % os.getloadavg())


def compare(s: Settings, total: int, other: str, rounds: int, port: int, workers: int = 1) -> None:
    """`workers` of ours and of the other checkout's, alternating per round on the same records."""
    rates: dict[str, list[float]] = {"ours": [], other: []}
    for n in range(rounds):
        for side, (name, code) in enumerate((("ours", None), (other, other))):
            group = f"{s.speed.group}-r{n}-{side}"  # a fresh group: each run reads every record
            lane_s = s.model_copy(update={"speed": s.speed.model_copy(update={"group": group})})
            rate = total / end_to_end(lane_s, workers, port, code)[0]
            rates[name].append(rate)
            print(f"round {n + 1}: {name}, {workers} worker(s): {rate:,.0f} records/s "
                  f"(load {os.getloadavg()[0]:.2f})", flush=True)
    for name, values in rates.items():
        print(f"median {name}: {statistics.median(values):,.0f} records/s over {values}")
    print("load average at end: %.2f %.2f %.2f" % os.getloadavg())


def report_freshness(base: Settings, args) -> None:
    lat, unseen, rate = freshness(base, args.fresh_rate, args.fresh_seconds, args.port + 10, args.every,
                                  args.fresh_workers)
    if lat:
        lat.sort()
        p50, p99 = statistics.median(lat), lat[min(len(lat) - 1, int(0.99 * len(lat)))]
        print(f"freshness at {rate:,.0f} posts/s ({args.fresh_workers} workers, materialize every {args.every} s, "
              f"{len(lat)} markers): "
              f"p50 {p50:.2f} s, p99 {p99:.2f} s")
    if unseen:
        print(f"freshness: {unseen} of {len(lat) + unseen} markers were not visible "
              f"{args.every + GRACE_S:.0f} s after the stream ended "
              "(the workers fell behind the rate; p50/p99 above cover the visible ones only)")
    elif not lat:
        print("freshness: no marker became visible")


if __name__ == "__main__":
    sys.exit(main())
