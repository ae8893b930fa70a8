"""Replay the generator's stream through the speed layer's atomic step, with no Kafka: Redis time a
post, payload size, and a digest of everything the steps wrote, for this checkout or two side by side.

The worker's own functions (parse_batch, aggregate_posts, build_payload, Writer.apply) run step by
step against Redis database 14 of the configured Redis (flushed), so a change to the step can be
measured alone and checked to write exactly the same keys:
    .venv/bin/python bench/speed_step_replay.py --posts 60000
    .venv/bin/python bench/speed_step_replay.py --against /tmp/old-checkout --rounds 3

Timings of the same code vary from run to run on a shared machine. `--callgrind` instead counts
the instructions Redis spends inside the scripts (valgrind's callgrind on a private redis-server):
the same count on every run, whatever else the machine does, so a change to the Lua step can be
judged by one run of each side (valgrind is much slower: use --posts 30000 or fewer):
    .venv/bin/python bench/speed_step_replay.py --callgrind --posts 30000 --against /tmp/old-checkout
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from adapters import redis as redis_io
from trendcore.settings import Settings

DB = 14
ROOT = Path(__file__).resolve().parents[1]  # this checkout: the "ours" side of a comparison


def replay(posts: int, step: int, now_ms: int, slow_server: bool = False) -> dict:
    """One replay in this interpreter (whatever checkout PYTHONPATH points at); returns its figures.
    `slow_server`: Redis runs under valgrind, so a step may take minutes (no socket timeout)."""
    # only functions every compared checkout has: --against runs this file over older code
    from speed.aggregate import Increments, aggregate_engagements, aggregate_posts, parse_batch
    from speed.cells import CellCache
    from speed.writer import Target, Writer, build_payload
    from trends.gen.model import GenConfig, Stream

    s = Settings()
    try:  # the key space argument; older checkouts have none
        from trendcore.keys import KeySpace
        space: tuple = (KeySpace.of(s.redis),)
    except ImportError:
        space = ()
    # the worker's collector threshold (speed.gc_threshold; older checkouts lack it), so the build is
    # timed as the worker runs it: Python's default makes full collections dominate it
    gc.set_threshold(getattr(s.speed, "gc_threshold", 700), 10, 10)
    url = s.redis.url.rsplit("/", 1)[0] + f"/{DB}"
    if slow_server:
        import redis
        client = redis.Redis.from_url(url, socket_timeout=None)
    else:
        client = redis_io.client(s.redis.model_copy(update={"url": url}))
    client.flushdb()
    # late events at most 30 min late: every key outlives the run by far, so the digests compare
    stream = Stream(GenConfig(seed=7, start_ms=now_ms - 600_000, wall_now_ms=now_ms, malformed_share=0.0,
                              duplicate_share=0.0, late_max_s=1800))
    steps = parsed_steps(list(stream.records(posts)), step, now_ms, parse_batch)
    writer = Writer(client, "replay", *space)
    epoch, cells = writer.ensure_epoch(), CellCache(s.sketch.shape)
    weights = {"view": s.speed.weight_view, "like": s.speed.weight_like, "repost": s.speed.weight_repost}
    build_s = apply_s = 0.0
    size = mentions = 0
    for kind, parsed in steps:
        started = time.perf_counter()
        if kind == "post":
            inc = aggregate_posts(parsed.posts, frozenset(), now_ms, s.speed.keep_minutes, s.speed.keep_hours)
        else:
            sums = aggregate_engagements(parsed.engagements, weights)  # (without id, by event_id) since #26
            inc = Increments(engagement=sums[0], engagement_ids=sums[1]) if isinstance(sums, tuple) \
                else Increments(engagement=sums)
        mentions += inc.mentions
        target = Target(f"replay-offset:{kind}", writer.epoch_key, epoch)
        payload = build_payload(inc, target, parsed.start, parsed.next, s.speed, cells, *space)
        built = time.perf_counter()
        writer.apply(payload)
        build_s, apply_s, size = build_s + built - started, apply_s + time.perf_counter() - built, size + len(payload)
    digest = contents_digest(client)
    client.flushdb()
    return {"posts": posts, "mentions": mentions, "steps": len(steps), "payload_mb": size / len(steps) / 1e6,
            "build_us": build_s / posts * 1e6, "redis_us": apply_s / posts * 1e6, "digest": digest}


def parsed_steps(records: list, step: int, now_ms: int, parse_batch) -> list[tuple[str, object]]:
    """Each topic's records cut into steps and parsed as a worker does; posts and engagements
    interleaved (by start offset), as one worker over both topics applies them."""
    steps = []
    for kind, topic in (("post", "posts"), ("engagement", "engagements")):
        rows = [r for r in records if r.topic == topic]
        for first in range(0, len(rows), step):
            values = ((first + i, r.key, r.value) for i, r in enumerate(rows[first:first + step]))
            steps.append((kind, parse_batch(values, kind, now_ms, 300_000)))
    return sorted(steps, key=lambda kind_parsed: kind_parsed[1].start)


def contents_digest(client) -> str:
    """SHA-1 over every key the steps wrote, by type (sketch bytes, sorted sets with scores, hashes);
    the epoch key holds a random token and is left out. Pipelined: a replay writes ~150,000 keys."""
    names = sorted(k for k in client.scan_iter(count=10_000) if not k.decode().endswith("epoch:replay"))
    h = hashlib.sha1()
    for first in range(0, len(names), 2_000):
        chunk = names[first:first + 2_000]
        pipe = client.pipeline(transaction=False)
        for key in chunk:
            pipe.type(key)
        kinds = pipe.execute()
        pipe = client.pipeline(transaction=False)
        for key, kind in zip(chunk, kinds, strict=True):
            if kind == b"zset":
                pipe.zrange(key, 0, -1, withscores=True)
            elif kind == b"hash":
                pipe.hgetall(key)
            else:
                pipe.get(key) if kind == b"string" else pipe.type(key)
        for key, value in zip(chunk, pipe.execute(), strict=True):
            value = repr(sorted(value.items())) if isinstance(value, dict) else repr(value)
            h.update(key + b"\0" + value.encode() + b"\0")
    return h.hexdigest()[:16]


def run_child(code: str, args: argparse.Namespace, now_ms: int, redis_url: str | None = None) -> dict:
    """One replay in a fresh interpreter importing `code` (a checkout) first."""
    env = {**os.environ, "PYTHONPATH": code}
    command = [sys.executable, __file__, "--child", "--posts", str(args.posts), "--step", str(args.step),
               "--now-ms", str(now_ms)]
    if redis_url:
        env["TRENDS_REDIS__URL"] = redis_url
        command.append("--slow-server")
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def under_callgrind(code: str, args: argparse.Namespace, now_ms: int) -> dict:
    """One replay against a private redis-server run by callgrind, collecting only inside script calls
    (evalGenericCommand); adds the instruction count to the replay's figures."""
    if not shutil.which("valgrind"):
        raise SystemExit("--callgrind needs valgrind (apt-get install valgrind)")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    folder = Path(tempfile.mkdtemp(prefix="replay-callgrind-"))
    out = folder / "callgrind.out"
    server = subprocess.Popen(["valgrind", "--tool=callgrind", "--toggle-collect=evalGenericCommand",
                               f"--callgrind-out-file={out}", "redis-server", "--port", str(port), "--save", "",
                               "--appendonly", "no", "--dir", str(folder), "--busy-reply-threshold", "600000"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"redis://127.0.0.1:{port}/0"
        ping = [shutil.which("redis-cli") or "redis-cli", "-p", str(port)]
        deadline = time.monotonic() + 120
        while subprocess.run(ping + ["ping"], capture_output=True).returncode != 0:
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("redis-server under valgrind did not start")
            time.sleep(0.5)
        result = run_child(code, args, now_ms, url)
        subprocess.run(ping + ["shutdown", "nosave"], capture_output=True)
        server.wait(timeout=300)
        totals = [line for line in out.read_text().splitlines() if line.startswith(("summary:", "totals:"))]
        result["instructions"] = int(totals[0].split()[1])
        return result
    finally:
        if server.poll() is None:
            server.kill()
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--posts", type=int, default=60_000)
    parser.add_argument("--step", type=int, default=Settings().speed.max_step_records, help="records per atomic step")
    parser.add_argument("--against", metavar="CHECKOUT", help="another checkout (git worktree), interleaved with ours")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--callgrind", action="store_true",
                        help="count Redis's instructions inside the scripts (valgrind) instead of timing; one round")
    parser.add_argument("--now-ms", type=int, help="pin the replay's clock (epoch ms): the same buckets on every run")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--slow-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    # one fixed clock for every side: the same buckets, so the digests compare
    now_ms = args.now_ms or int(time.time() * 1000)
    if args.child:
        print(json.dumps(replay(args.posts, args.step, now_ms, args.slow_server)))
        return
    if args.callgrind:
        return report_callgrind(args, now_ms)
    sides = [("ours", str(ROOT))] + ([(args.against, args.against)] if args.against else [])
    results: dict[str, list[dict]] = {name: [] for name, _ in sides}
    for n in range(args.rounds if args.against else 1):
        for name, code in sides:
            r = run_child(code, args, now_ms)
            results[name].append(r)
            print(f"round {n + 1}: {name}: {r['steps']} steps, payload {r['payload_mb']:.2f} MB a step, "
                  f"worker build {r['build_us']:.1f} µs/post, Redis step {r['redis_us']:.1f} µs/post, "
                  f"{r['mentions']:,} mentions, digest {r['digest']}", flush=True)
    for name, rows in results.items():
        print(f"median {name}: Redis step {statistics.median(r['redis_us'] for r in rows):.1f} µs/post, "
              f"build {statistics.median(r['build_us'] for r in rows):.1f} µs/post")
    digests = {r["digest"] for rows in results.values() for r in rows}
    if args.against:
        print("contents: " + ("identical on every run" if len(digests) == 1 else f"DIFFER ({sorted(digests)})"))


def report_callgrind(args: argparse.Namespace, now_ms: int) -> None:
    """Instructions a post inside the scripts, ours and (with --against) the other checkout's."""
    sides = [("ours", str(ROOT))] + ([(args.against, args.against)] if args.against else [])
    digests = set()
    for name, code in sides:
        r = under_callgrind(code, args, now_ms)
        digests.add(r["digest"])
        print(f"{name}: {r['steps']} steps, {r['instructions']:,} instructions in the scripts, "
              f"{r['instructions'] / r['posts']:,.0f} a post, digest {r['digest']}", flush=True)
    if args.against:
        print("contents: " + ("identical" if len(digests) == 1 else f"DIFFER ({sorted(digests)})"))


if __name__ == "__main__":
    sys.exit(main())
