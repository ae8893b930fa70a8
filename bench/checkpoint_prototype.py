"""Prototype for issue #24: per-record Redis work (today's Lua step) against partition-owned state
checkpointed with the offset (sketch arrays in the worker, one atomic SET step per partition and flush,
a merger summing the partitions every few seconds). Both sides run over the same generated posts, in
one run, against one private redis-server each (started and stopped here); Redis CPU comes from its
`INFO cpu`, memory from `used_memory`. No Kafka: records are split into partitions by key.

    .venv/bin/python bench/checkpoint_prototype.py --posts 100000 --partitions 4

Only sketches, totals, candidates and offsets are on the checkpoint side (the parts that cost Redis
CPU today); post lists and author sketches are left to the design (docs/decisions.md).
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import tempfile
import time
import zlib
from collections import defaultdict
from pathlib import Path

import numpy as np
import redis

from speed.aggregate import aggregate_posts, parse_batch
from speed.writer import CellCache, Target, Writer, _step_cells, build_payload
from trendcore.keys import KeySpace
from trendcore.settings import Settings
from trends.gen.model import GenConfig, Stream

SPARSE = True

CHECKPOINT = """
-- KEYS[1] = the partition's offset key, KEYS[2..] = the blobs; ARGV[1] = expected start, ARGV[2] = next
-- offset, ARGV[3..] = the blobs' values. Every key carries the partition's hash tag: one slot.
local stored = redis.call('GET', KEYS[1])
if stored and stored ~= ARGV[1] then return {'STALE', stored} end
for i = 2, #KEYS do redis.call('SET', KEYS[i], ARGV[i + 1]) end
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


class PartitionState:
    """One partition's open buckets in memory: sketch arrays, totals, candidate estimates."""

    def __init__(self, settings: Settings) -> None:
        self.shape, self.cs = settings.sketch.shape, settings.speed.candidates
        self.arrays: dict[tuple, np.ndarray] = {}
        self.totals: dict[tuple, int] = defaultdict(int)
        self.cands: dict[tuple, dict[str, int]] = defaultdict(dict)
        self.dirty: set[tuple] = set()

    def add(self, inc, cells: CellCache) -> None:
        tags, flat, rows = _step_cells(inc.sketches, cells)
        matrix = flat.reshape(len(tags), self.shape.depth)
        size = self.shape.width * self.shape.depth
        for (key, counter), (idx, ids, amounts) in zip(inc.sketches.items(), rows, strict=True):
            arr = self.arrays.get(key)
            if arr is None:
                arr = self.arrays[key] = np.zeros(size, dtype=np.uint32)
            arr[ids] += amounts.astype(np.uint32)
            self.totals[key] += counter.total()
            estimates = arr[matrix[idx]].min(axis=1)
            cand = self.cands[key]
            cand.update(zip((tags[i] for i in idx), estimates.tolist(), strict=True))
            if len(cand) > 2 * self.cs:
                kept = sorted(cand.items(), key=lambda kv: -kv[1])[:self.cs]
                self.cands[key] = dict(kept)
            self.dirty.add(key)

    def checkpoint(self, p: int) -> tuple[list[str], list[bytes]]:
        """Key names and values of the changed buckets, all under the partition's hash tag."""
        names, values = [], []
        for key in self.dirty:
            region, unit, bucket = key
            tag = f"{{p{p}}}"
            top = sorted(self.cands[key].items(), key=lambda kv: -kv[1])[:self.cs]
            names += [f"{tag}cms:{region}:{unit}:{bucket}", f"{tag}meta:{region}:{unit}:{bucket}"]
            blob = encode(self.arrays[key]) if SPARSE else self.arrays[key].tobytes()
            values += [blob, json.dumps({"n": self.totals[key], "c": top}).encode()]
        self.dirty.clear()
        return names, values


def encode(arr: np.ndarray) -> bytes:
    """A sketch array as bytes: dense (b"D" + u32 cells) or, when smaller, sparse (b"S" + u16 indexes + u32
    values): most buckets (a region's minute, a late bucket) touch few of their cells."""
    nz = np.flatnonzero(arr)
    if len(nz) * 6 < arr.nbytes:
        return b"S" + nz.astype(np.uint16).tobytes() + arr[nz].tobytes()
    return b"D" + arr.tobytes()


def decode(blob: bytes, size: int) -> np.ndarray:
    if blob[:1] == b"D":
        return np.frombuffer(blob, dtype=np.uint32, offset=1)
    n = (len(blob) - 1) // 6
    arr = np.zeros(size, dtype=np.uint32)
    where = np.frombuffer(blob, dtype=np.uint16, count=n, offset=1)
    arr[where] = np.frombuffer(blob, dtype=np.uint32, offset=1 + 2 * n)
    return arr


def merge(client: redis.Redis, partitions: int, buckets: set[tuple], cs: int, shape) -> None:
    """The merger: per bucket changed since the last merge, sum the partitions' arrays, estimate the
    union of their candidates on the sum, write the merged sketch, total and candidates."""
    for region, unit, bucket in buckets:
        blobs = client.mget([f"{{p{p}}}cms:{region}:{unit}:{bucket}" for p in range(partitions)])
        metas = client.mget([f"{{p{p}}}meta:{region}:{unit}:{bucket}" for p in range(partitions)])
        total = np.zeros(shape.width * shape.depth, dtype=np.uint32)
        n, names = 0, set()
        for blob, meta in zip(blobs, metas, strict=True):
            if blob is not None:
                total += decode(blob, total.size) if SPARSE else np.frombuffer(blob, dtype=np.uint32)
                doc = json.loads(meta)
                n += doc["n"]
                names.update(t for t, _ in doc["c"])
        cells = np.array([CellCache(shape)(t) for t in names], dtype=np.int64).reshape(-1, shape.depth)
        est = total[cells].min(axis=1) if len(names) else []
        top = sorted(zip(names, map(int, est), strict=True), key=lambda kv: -kv[1])[:cs]
        pipe = client.pipeline(transaction=False)
        pipe.set(f"cms:{region}:{unit}:{bucket}", total.tobytes())
        pipe.set(f"total:{region}:{unit}:{bucket}", n)
        pipe.delete(f"cand:{region}:{unit}:{bucket}")
        if top:
            pipe.zadd(f"cand:{region}:{unit}:{bucket}", {t: e for t, e in top})
        pipe.execute()


def checkpoint_side(steps, settings: Settings, now_ms: int, partitions: int, flush_every: int,
                    merge_every: int) -> dict:
    """The proposed design: state in memory, one atomic SET step per partition every `flush_every`
    records of it (the flush interval), the merger every `merge_every` flushes."""
    server, client, folder = private_redis()
    try:
        script = client.register_script(CHECKPOINT)
        cells = CellCache(settings.sketch.shape)
        states = [PartitionState(settings) for _ in range(partitions)]
        since_flush, offsets, flushes, changed = [0] * partitions, [0] * partitions, 0, set()
        mem0, cpu0, worker, merge_cpu = client.info("memory")["used_memory"], cpu_s(client), 0.0, 0.0
        for p, parsed in steps:
            started = time.process_time()
            inc = aggregate_posts(parsed.posts, frozenset(), now_ms, settings.speed.keep_minutes,
                                  settings.speed.keep_hours)
            states[p].add(inc, cells)
            worker += time.process_time() - started
            since_flush[p] += parsed.next - parsed.start
            if since_flush[p] < flush_every:
                continue
            started = time.process_time()
            changed |= states[p].dirty
            names, values = states[p].checkpoint(p)
            worker += time.process_time() - started
            script(keys=[f"{{p{p}}}offset", *names], args=[offsets[p], parsed.next, *values])
            offsets[p], since_flush[p], flushes = parsed.next, 0, flushes + 1
            if flushes % merge_every == 0:
                before = cpu_s(client)
                merge(client, partitions, changed, settings.speed.candidates, settings.sketch.shape)
                changed = set()
                merge_cpu += cpu_s(client) - before
        for p, state in enumerate(states):  # the last flush and merge
            changed |= state.dirty
            names, values = state.checkpoint(p)
            if names:
                script(keys=[f"{{p{p}}}offset", *names], args=[offsets[p], offsets[p] + 1, *values])
        merge(client, partitions, changed, settings.speed.candidates, settings.sketch.shape)
        return {"redis_s": cpu_s(client) - cpu0, "worker_s": worker,
                "memory": client.info("memory")["used_memory"] - mem0, "flushes": flushes, "merge_s": merge_cpu}
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
    now_ms = int(time.time() * 1000)
    steps = partition_steps(args.posts, args.partitions, settings.speed.max_step_records, now_ms)
    flush_every = int(args.rate * args.flush_s / args.partitions)
    merge_every = max(1, round(args.merge_s / args.flush_s * args.partitions))
    lua = lua_side(steps, settings, now_ms)
    ckpt = checkpoint_side(steps, settings, now_ms, args.partitions, flush_every, merge_every)
    for name, r in (("lua step (today)", lua), ("checkpoint + merge", ckpt)):
        print(f"{name}: Redis {r['redis_s'] / args.posts * 1e6:.2f} µs/post, worker build "
              f"{r['worker_s'] / args.posts * 1e6:.1f} µs/post, Redis memory +{r['memory'] / 1e6:.1f} MB "
              f"({r['memory'] / args.posts:.0f} B/post)" + (f", {r['flushes']} flushes" if "flushes" in r else ""))
    print(f"of which the merger: {ckpt['merge_s'] / args.posts * 1e6:.2f} µs/post")
    print(f"Redis CPU ratio today / checkpoint: {lua['redis_s'] / max(ckpt['redis_s'], 1e-9):.1f}x")


if __name__ == "__main__":
    main()
