"""Prototype for issue #24: per-record Redis work (today's Lua step) against partition-owned state
checkpointed with the offset (speed/state.py in the worker, one atomic SET step per partition and flush,
the merger of speed/merge.py summing the partitions every few seconds). Both sides run over the same
generated posts, in one run, against one private redis-server each (started and stopped here); Redis CPU
comes from its `INFO cpu`, memory from `used_memory`. No Kafka: records are split into partitions by key.

    .venv/bin/python bench/checkpoint_prototype.py --posts 100000 --partitions 4

Both sides carry sketches, totals, candidates, author sketches and newest posts with their bodies (on
the checkpoint side, as speed/state.py rules, authors and newest posts only for each partition's
worldwide hour candidates). The merged keys keep today's names and expiry; the merged newest posts (JSON)
and author sketches (trendcore.hll bytes) stand in for formats the readers have yet to agree on
(docs/redis-layout.md). The merger merges and writes only the buckets and (tag, hour)s some partition
checkpointed since its previous merge, and of a bucket's candidate set only what moved.

Besides the totals per post it prints where the checkpoint side's time goes: Redis CPU in the checkpoint
steps, in the merger's reads and writes, and the rest (the idle server's cron and the INFO calls that
measure it); the worker's aggregation, adding to the state and checkpoint encoding (expire + checkpoint);
the merger's own Python CPU.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import socket
import subprocess
import tempfile
import time
import zlib
from collections import defaultdict
from pathlib import Path

import redis

from speed.aggregate import aggregate_posts, parse_batch
from speed.cells import CellCache
from speed.merge import merge_authors, merge_buckets, merge_newest
from speed.state import Checkpoint, PartitionState, StateLimits
from speed.state_codec import encode_posts
from speed.writer import Target, Writer, build_payload
from trendcore.keys import KeySpace
from trendcore.settings import Settings
from trends.gen.model import GenConfig, Stream

CHECKPOINT = """
-- KEYS[1] = the partition's offset key, KEYS[2 .. ARGV[3] + 1] = keys to write, the rest = keys to delete;
-- ARGV[1] = expected start, ARGV[2] = next offset, ARGV[3] = writes, then (value, expire at s) per write.
-- Every key carries the partition's hash tag: one slot.
local stored = redis.call('GET', KEYS[1])
if stored and stored ~= ARGV[1] then return {'STALE', stored} end
local writes = tonumber(ARGV[3])
for i = 1, writes do redis.call('SET', KEYS[i + 1], ARGV[2 * i + 2], 'EXAT', ARGV[2 * i + 3]) end
for i = writes + 2, #KEYS do redis.call('DEL', KEYS[i]) end
redis.call('SET', KEYS[1], ARGV[2])
return {'OK'}
"""


def private_redis() -> tuple[subprocess.Popen, redis.Redis, Path]:
    """A redis-server of our own on a free port (so INFO cpu is only this side's work)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    folder = Path(tempfile.mkdtemp(prefix="ckpt-proto-"))
    server = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
                               "--dir", str(folder)], stdout=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    for _ in range(100):
        try:
            client.ping()
            return server, client, folder
        except redis.ConnectionError:
            time.sleep(0.05)
    raise SystemExit("redis-server did not start")


def cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return info["used_cpu_user"] + info["used_cpu_sys"]


def partition_steps(posts: int, partitions: int, step: int, now_ms: int) -> list[tuple[int, object]]:
    """The generated posts split by key into partitions and cut into parsed steps, interleaved."""
    stream = Stream(GenConfig(seed=7, start_ms=now_ms - 600_000, wall_now_ms=now_ms, malformed_share=0.0,
                              duplicate_share=0.0, late_max_s=1800))
    rows: dict[int, list] = defaultdict(list)
    for r in stream.records(posts):
        if r.topic == "posts":
            rows[zlib.crc32(r.key) % partitions].append(r)
    steps = []
    for p, records in rows.items():
        for first in range(0, len(records), step):
            chunk = ((first + i, r.key, r.value) for i, r in enumerate(records[first:first + step]))
            steps.append((p, parse_batch(chunk, "post", now_ms, 300_000)))
    return sorted(steps, key=lambda ps: ps[1].start)


def lua_side(steps, settings: Settings, now_ms: int) -> dict:
    """Today's design: every step through the Lua script (per-cell BITFIELD, post hashes, HLLs)."""
    server, client, folder = private_redis()
    try:
        keys, cells = KeySpace(), CellCache(settings.sketch.shape)
        writer = Writer(client, "proto", keys)
        epoch = writer.ensure_epoch()
        mem0, cpu0, worker = client.info("memory")["used_memory"], cpu_s(client), 0.0
        for p, parsed in steps:
            started = time.process_time()
            inc = aggregate_posts(parsed.posts, frozenset(), now_ms, settings.speed.keep_minutes,
                                  settings.speed.keep_hours)
            payload = build_payload(inc, Target(f"off:{p}", writer.epoch_key, epoch), parsed.start, parsed.next,
                                    settings.speed, cells, keys)
            worker += time.process_time() - started
            writer.apply(payload)
        return {"redis_s": cpu_s(client) - cpu0, "worker_s": worker,
                "memory": client.info("memory")["used_memory"] - mem0}
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(folder, ignore_errors=True)


def write_checkpoint(script, keys: KeySpace, checkpoint: Checkpoint, start: int, next_offset: int) -> None:
    """The partition's changed keys and its next offset, in one atomic step."""
    names = [keys.part_offset(checkpoint.partition, "posts"), *(e.key for e in checkpoint.writes),
             *checkpoint.deletes]
    values = [v for e in checkpoint.writes for v in (e.value, e.expire_at_s)]
    script(keys=names, args=[start, next_offset, len(checkpoint.writes), *values])


def changed_by(keys: KeySpace, checkpoint: Checkpoint, changed: dict[str, set]) -> None:
    """Note what the merger must merge again: the buckets and (tag, hour)s a checkpoint wrote or deleted."""
    for key in (*(e.key for e in checkpoint.writes), *checkpoint.deletes):
        _, kind, coords = keys.parse_part(key)
        changed["bucket" if kind in ("cms", "meta") else kind].add(coords)


def merge(client: redis.Redis, keys: KeySpace, partitions: int, changed: dict[str, set], settings: Settings,
          cells: CellCache, limits: StateLimits, ranked: dict[tuple, dict[str, int]]) -> None:
    """The merger: per bucket changed since the last merge, sum the partitions' sketches and estimate the
    union of their candidates on the sum; per (tag, hour), the newest of their lists and the union of their
    author sketches. Nothing else is read or written. A bucket's candidate set gets only the members that
    moved (`ranked`: what the merger wrote last, per bucket); a list or author sketch no partition holds any
    more is deleted. Reads and writes are pipelined."""
    speed, shape = settings.speed, settings.sketch.shape
    buckets, lists, authors = sorted(changed["bucket"]), sorted(changed["new"]), sorted(changed["hll"])
    for kinds in changed.values():
        kinds.clear()
    if not (buckets or lists or authors):
        return
    read = client.pipeline(transaction=False)
    for region, unit, bucket in buckets:
        read.mget([k for p in range(partitions) for k in (keys.part_sketch(p, region, unit, bucket),
                                                          keys.part_meta(p, region, unit, bucket))])
    for tag, hour in lists:
        read.mget([keys.part_new_posts(p, tag, hour) for p in range(partitions)])
    for tag, hour in authors:
        read.mget([keys.part_authors(p, tag, hour) for p in range(partitions)])
    got = iter(read.execute())
    write = client.pipeline(transaction=False)
    for coords in buckets:
        blobs = next(got)
        merged = merge_buckets(zip(blobs[::2], blobs[1::2], strict=True), shape, speed.candidates, cells)
        expire_at = limits.expire_at_s(coords[1], coords[2])
        write.set(keys.cms(*coords), merged.counters.astype(">u4").tobytes(), exat=expire_at)
        write.set(keys.total(*coords), merged.total, exat=expire_at)
        before, now = ranked.get(coords, {}), dict(merged.candidates)
        gone, moved = before.keys() - now.keys(), {tag: est for tag, est in now.items() if before.get(tag) != est}
        if gone:
            write.zrem(keys.candidates(*coords), *sorted(gone))
        if moved:
            write.zadd(keys.candidates(*coords), moved)
            write.expireat(keys.candidates(*coords), expire_at)
        ranked[coords] = now
    for tag, hour in lists:
        entries = merge_newest(next(got), speed.posts_per_tag)
        if entries:
            write.set(keys.new_posts(tag, hour), encode_posts(entries), exat=limits.expire_at_s("h", hour))
        else:
            write.delete(keys.new_posts(tag, hour))
    for tag, hour in authors:
        sketch = merge_authors(next(got))
        if sketch is None:
            write.delete(keys.authors(tag, hour))
        else:
            write.set(keys.authors(tag, hour), sketch.to_bytes(), exat=limits.expire_at_s("h", hour))
    write.execute()


def checkpoint_side(steps, settings: Settings, now_ms: int, partitions: int, flush_every: int,
                    merge_every: int) -> dict:
    """The proposed design: state in memory, one atomic SET step per partition every `flush_every`
    records of it (the flush interval), the merger every `merge_every` flushes."""
    server, client, folder = private_redis()
    try:
        script, keys = client.register_script(CHECKPOINT), KeySpace()
        cells, limits = CellCache(settings.sketch.shape), StateLimits.of(settings.speed)
        states = [PartitionState(settings.sketch.shape, limits, keys) for _ in range(partitions)]
        since_flush, offsets, nexts, flushes = [0] * partitions, [0] * partitions, [0] * partitions, 0
        changed: dict[str, set] = {"bucket": set(), "new": set(), "hll": set()}
        ranked: dict[tuple, dict[str, int]] = {}
        split = dict.fromkeys(("aggregate", "add", "encode", "ckpt_redis", "merge_redis", "merger"), 0.0)
        written = {"writes": 0, "deletes": 0}
        mem0, cpu0 = client.info("memory")["used_memory"], cpu_s(client)

        def flush(p: int, next_offset: int) -> None:
            started = time.process_time()
            states[p].expire(now_ms)
            checkpoint = states[p].checkpoint(p)
            split["encode"] += time.process_time() - started
            before = cpu_s(client)
            write_checkpoint(script, keys, checkpoint, offsets[p], next_offset)
            split["ckpt_redis"] += cpu_s(client) - before
            written["writes"] += len(checkpoint.writes)
            written["deletes"] += len(checkpoint.deletes)
            changed_by(keys, checkpoint, changed)
            offsets[p], since_flush[p] = next_offset, 0

        def merged() -> None:
            before, started = cpu_s(client), time.process_time()
            merge(client, keys, partitions, changed, settings, cells, limits, ranked)
            split["merger"] += time.process_time() - started
            split["merge_redis"] += cpu_s(client) - before

        for p, parsed in steps:
            started = time.process_time()
            inc = aggregate_posts(parsed.posts, frozenset(), now_ms, settings.speed.keep_minutes,
                                  settings.speed.keep_hours)
            aggregated = time.process_time()
            states[p].add(inc, cells)
            split["aggregate"] += aggregated - started
            split["add"] += time.process_time() - aggregated
            since_flush[p] += parsed.next - parsed.start
            nexts[p] = parsed.next
            if since_flush[p] < flush_every:
                continue
            flush(p, parsed.next)
            flushes += 1
            if flushes % merge_every == 0:
                merged()
        for p in range(partitions):  # the last flush and merge
            if since_flush[p]:
                flush(p, nexts[p])
        merged()
        return {"redis_s": cpu_s(client) - cpu0, "worker_s": split["aggregate"] + split["add"] + split["encode"],
                "memory": client.info("memory")["used_memory"] - mem0, "flushes": flushes, **split, **written}
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rate", type=int, default=15_000, help="posts/s the flush interval is sized for")
    parser.add_argument("--flush-s", type=float, default=1.0, help="flush interval")
    parser.add_argument("--merge-s", type=float, default=2.0, help="merge interval")
    args = parser.parse_args()
    settings = Settings()
    gc.set_threshold(settings.speed.gc_threshold, 10, 10)  # as the worker does (speed/worker.py)
    now_ms = int(time.time() * 1000)
    steps = partition_steps(args.posts, args.partitions, settings.speed.max_step_records, now_ms)
    flush_every = int(args.rate * args.flush_s / args.partitions)
    merge_every = max(1, round(args.merge_s / args.flush_s * args.partitions))
    lua = lua_side(steps, settings, now_ms)
    ckpt = checkpoint_side(steps, settings, now_ms, args.partitions, flush_every, merge_every)
    def us(seconds: float) -> str:
        return f"{seconds / args.posts * 1e6:.2f}"

    for name, r in (("lua step (today)", lua), ("checkpoint + merge", ckpt)):
        print(f"{name}: Redis {us(r['redis_s'])} µs/post, worker build "
              f"{r['worker_s'] / args.posts * 1e6:.1f} µs/post, Redis memory +{r['memory'] / 1e6:.1f} MB "
              f"({r['memory'] / args.posts:.0f} B/post)" + (f", {r['flushes']} flushes" if "flushes" in r else ""))
    rest = ckpt["redis_s"] - ckpt["ckpt_redis"] - ckpt["merge_redis"]
    print(f"checkpoint side, Redis CPU µs/post: checkpoint steps {us(ckpt['ckpt_redis'])}, merger "
          f"{us(ckpt['merge_redis'])}, rest (idle cron, INFO) {us(rest)}; checkpoints wrote "
          f"{ckpt['writes'] / args.posts:.3f} keys/post, deleted {ckpt['deletes'] / args.posts:.3f} keys/post")
    print(f"checkpoint side, worker µs/post: aggregate {us(ckpt['aggregate'])}, add to state {us(ckpt['add'])}, "
          f"checkpoint encoding {us(ckpt['encode'])}; merger process (Python) {us(ckpt['merger'])}")
    print(f"Redis CPU ratio today / checkpoint: {lua['redis_s'] / max(ckpt['redis_s'], 1e-9):.1f}x")


if __name__ == "__main__":
    main()
