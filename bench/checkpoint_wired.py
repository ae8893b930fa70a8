"""Redis cost of the wired partition path (issue #24, `speed.state=partition`): the worker's own checkpoint
pipeline (speed/checkpoint.py, speed/checkpoint.lua through speed/partition_store.py, seen-id chunks and the
key index included) and the materializer's merger (speed/merger.py), against today's Lua step, over the
same generated posts, each side on a private redis-server (bench/checkpoint_prototype.py's harness). No
Kafka: records are split into partitions by key.

    .venv/bin/python bench/checkpoint_wired.py --posts 100000 --partitions 4
"""

from __future__ import annotations

import argparse
import gc
import shutil
import time

from bench.checkpoint_prototype import cpu_s, lua_side, partition_steps, private_redis
from speed.aggregate import aggregate_posts
from speed.cells import CellCache
from speed.checkpoint import Checkpointer, Owned, SeenIds
from speed.merger import Merger
from speed.partition_store import PartitionStore
from speed.state import PartitionState, StateLimits
from trendcore.keys import KeySpace
from trendcore.settings import Settings


def wired_side(steps, settings: Settings, now_ms: int, partitions: int, flush_every: int, merge_every: int) -> dict:
    """Checkpoint each partition every `flush_every` of its records, merge every `merge_every` checkpoints."""
    server, client, folder = private_redis()
    try:
        keys, cells = KeySpace(), CellCache(settings.sketch.shape)
        store, checkpointer = PartitionStore(client, keys), Checkpointer(keys, settings.speed.post_ttl_s)
        merger = Merger(client, keys, settings.model_copy(
            update={"kafka": settings.kafka.model_copy(update={"partitions": partitions})}))
        owned = [Owned("posts", p, stored=0, fresh=True,
                       state=PartitionState(settings.sketch.shape, StateLimits.of(settings.speed), keys),
                       seen=SeenIds(settings.speed.seen_post_ids)) for p in range(partitions)]
        since, flushes = [0] * partitions, 0
        split = dict.fromkeys(("worker", "ckpt_redis", "merge_redis", "merger"), 0.0)
        mem0, cpu0 = client.info("memory")["used_memory"], cpu_s(client)

        def flush(p: int) -> None:
            started = time.process_time()
            payload = checkpointer.prepare(owned[p], now_ms)
            split["worker"] += time.process_time() - started
            before = cpu_s(client)
            store.submit(payload)
            split["ckpt_redis"] += cpu_s(client) - before
            checkpointer.settle(owned[p], payload, now_ms)
            since[p] = 0

        def merge() -> None:
            before, started = cpu_s(client), time.process_time()
            merger.run(now_ms)
            split["merger"] += time.process_time() - started
            split["merge_redis"] += cpu_s(client) - before

        for p, parsed in steps:
            started, one = time.process_time(), owned[p]
            known = frozenset(one.seen.known(post.post_id for post in parsed.posts))
            inc = aggregate_posts(parsed.posts, known, now_ms, settings.speed.keep_minutes, settings.speed.keep_hours)
            one.state.add(inc, cells)
            one.seen.add([post.post_id for post in parsed.posts if post.post_id not in known], parsed.start)
            one.next_offset = parsed.next
            split["worker"] += time.process_time() - started
            since[p] += parsed.next - parsed.start
            if since[p] >= flush_every:
                flush(p)
                flushes += 1
                if flushes % merge_every == 0:
                    merge()
        for p in range(partitions):
            if owned[p].pending():
                flush(p)
        merge()
        return {"redis_s": cpu_s(client) - cpu0, "memory": client.info("memory")["used_memory"] - mem0,
                "flushes": flushes, **split}
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
    parser.add_argument("--no-lua", action="store_true", help="skip today's Lua side")
    args = parser.parse_args()
    settings = Settings()
    gc.set_threshold(settings.speed.gc_threshold, 10, 10)
    now_ms = int(time.time() * 1000)
    steps = partition_steps(args.posts, args.partitions, settings.speed.max_step_records, now_ms)
    flush_every = int(args.rate * args.flush_s / args.partitions)
    merge_every = max(1, round(args.merge_s / args.flush_s * args.partitions))
    per = 1e6 / args.posts
    if not args.no_lua:
        lua = lua_side(steps, settings, now_ms)
        print(f"lua step (today): Redis {lua['redis_s'] * per:.2f} µs/post, memory +{lua['memory'] / args.posts:.0f} "
              f"B/post")
    wired = wired_side(steps, settings, now_ms, args.partitions, flush_every, merge_every)
    print(f"partition path (wired): Redis {wired['redis_s'] * per:.2f} µs/post (checkpoint steps "
          f"{wired['ckpt_redis'] * per:.2f}, merger {wired['merge_redis'] * per:.2f}), memory "
          f"+{wired['memory'] / args.posts:.0f} B/post, {wired['flushes']} checkpoints; worker "
          f"{wired['worker'] * per:.1f} µs/post, merger process {wired['merger'] * per:.1f} µs/post")


if __name__ == "__main__":
    main()
