"""Redis's cost of the checkpoint step (speed/checkpoint.lua), this checkout's script against another, side by side.

Run: .venv/bin/python bench/checkpoint_bench.py --redis redis://127.0.0.1:28079/15 --against OLD.lua
     (OLD.lua, e.g. from `git show <rev>:speed/checkpoint.lua > /tmp/old.lua`)
     .venv/bin/python bench/checkpoint_bench.py --redis ... --history-posts 100000 --kinds
     (the steady state; then the step without each key family: where the step's time goes)

One partition's state is fed the generator's posts at `--rate` a simulated second (3,750: the freshness run's
15,000 posts/s over 4 partitions) and checkpointed every simulated second, as speed/worker.py does; the
payloads are made once, before any clock starts. Then each script submits the same payloads, in order, to
the flushed database, in interleaved rounds; Redis's CPU (INFO cpu) and the script's command time
(`evalsha` in INFO commandstats) are read around each. Pure CPU work on one Redis: no Kafka, no worker.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from itertools import islice
from pathlib import Path

import redis
from rich.progress import track

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: the checkout's packages

from speed.aggregate import parse_batch, step_increments  # noqa: E402
from speed.cells import CellCache  # noqa: E402
from speed.checkpoint import SCRIPT_PATH, Checkpointer, CheckpointPayload, Owned, SeenIds  # noqa: E402
from speed.state import PartitionState, StateLimits  # noqa: E402
from trendcore.keys import KeySpace  # noqa: E402
from trendcore.post_lists import right_sized  # noqa: E402
from trendcore.settings import Settings  # noqa: E402
from trends.gen.model import GenConfig, Stream  # noqa: E402

HISTORY_HOURS = 3
"""How far back `--history-posts` starts: the generator's late records reach 3 hours back."""


def posts_of(stream: Stream) -> Iterator[bytes]:
    """The stream's posts, as the worker receives them (one iterator: each post once)."""
    return (right_sized(r.value) for r in stream.records() if r.topic == "posts")


def feed(owned: Owned, posts: Iterator[bytes], settings: Settings, cells: CellCache, count: int, clock: int) -> None:
    """Feed the next `count` of `posts` into `owned` as one step at `clock`, as the worker's step does."""
    speed = settings.speed
    rows = list(islice(posts, count))
    batch = [(owned.next_offset + i, b"k", row) for i, row in enumerate(rows)]
    parsed = parse_batch(batch, "post", clock, settings.validation.max_future_s * 1000)
    known = frozenset(owned.seen.known(p.post_id for p in parsed.posts))
    owned.state.add(step_increments("post", parsed, known, clock, speed.keep_minutes, speed.keep_hours, {}), cells)
    owned.seen.add([p.post_id for p in parsed.posts if p.post_id not in known], parsed.start)
    owned.next_offset += len(rows)


def payloads(settings: Settings, rate: int, seconds: int,
             history: int) -> tuple[CheckpointPayload | None, list[CheckpointPayload], int]:
    """One partition's checkpoints, a simulated second each, of `rate` posts a second ending now (the keys'
    expiry is real time), after `history` posts an hour over the 3 hours before (the steady state: full hour
    and minute buckets that late records touch), checkpointed once; (that first checkpoint, the measured
    ones, the measured posts)."""
    speed, shape, keys = settings.speed, settings.sketch.shape, KeySpace.of(settings)
    start_ms = (int(time.time()) - seconds) * 1000
    owned = Owned("posts", 0, stored=0, fresh=True, state=PartitionState(shape, StateLimits.of(speed), keys),
                  seen=SeenIds(speed.seen_post_ids))
    cells, made, first = CellCache(shape), [], None
    checkpointer = Checkpointer(keys, speed.post_ttl_s)
    if history:
        begin, step_s = start_ms - HISTORY_HOURS * 3_600_000, 60
        history_posts = posts_of(Stream(GenConfig(seed=5, start_ms=begin, event_rate=history / 3600,
                                                  wall_now_ms=start_ms, engagements_per_post=0, spike_at_s=10**9)))
        for minute in track(range(HISTORY_HOURS * 60), description="history"):
            feed(owned, history_posts, settings, cells, round(history / 60), begin + (minute + 1) * step_s * 1000)
        first = checkpointer.prepare(owned, start_ms)
        Checkpointer.settle(owned, first, start_ms)
    live = posts_of(Stream(GenConfig(seed=7, start_ms=start_ms, event_rate=rate,
                                     wall_now_ms=start_ms + seconds * 1000, engagements_per_post=0)))
    for second in range(seconds):
        clock = start_ms + (second + 1) * 1000
        feed(owned, live, settings, cells, rate, clock)
        payload = checkpointer.prepare(owned, clock)
        made.append(payload)
        Checkpointer.settle(owned, payload, clock)
    return first, made, rate * seconds


def kind_of(keys: KeySpace, key: str) -> str:
    """The family of a partition state key (cms, meta, hll, new, top, seen)."""
    return keys.parse_part(key)[1]


def without(payload: CheckpointPayload, keys: KeySpace, kind: str) -> CheckpointPayload:
    """The same step with the keys of one family left out: what that family costs is the difference."""
    return replace(payload, entries=tuple(e for e in payload.entries if kind_of(keys, e.key) != kind),
                   deletes=tuple(k for k in payload.deletes if kind_of(keys, k) != kind))


def breakdown(made: list[CheckpointPayload], keys: KeySpace) -> dict[str, tuple[int, int]]:
    """Keys written or deleted and bytes written, a checkpoint on average, by family."""
    found: dict[str, list[int]] = {}
    for payload in made:
        for entry in payload.entries:
            row = found.setdefault(kind_of(keys, entry.key), [0, 0])
            row[0] += 1
            row[1] += len(entry.value)
        for key in payload.deletes:
            found.setdefault(kind_of(keys, key), [0, 0])[0] += 1
    return {kind: (n // len(made), size // len(made)) for kind, (n, size) in sorted(found.items())}


def evalsha_usec(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("usec", 0))


def cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def run(client: redis.Redis, source: str, first: CheckpointPayload | None,
        made: list[CheckpointPayload]) -> tuple[float, float]:
    """Submit every payload with the script `source` on the flushed database (after `first`, not counted):
    (Redis CPU s, evalsha s)."""
    client.flushdb()
    script = client.register_script(source)
    if first is not None:
        Checkpointer.outcome(script(keys=first.keys(), args=first.args()))
    cpu, usec = cpu_s(client), evalsha_usec(client)
    for payload in made:
        Checkpointer.outcome(script(keys=payload.keys(), args=payload.args()))
    return cpu_s(client) - cpu, (evalsha_usec(client) - usec) / 1e6


def report(name: str, runs: list[tuple[float, float]], posts: int, checkpoints: int) -> float:
    """Print one side's medians; return its median Redis CPU s."""
    cpu, usec = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
    print(f"{name:12s} Redis CPU {cpu * 1e6 / posts:.2f} µs a post ({cpu * 1e3 / checkpoints:.2f} ms a checkpoint), "
          f"evalsha {usec * 1e6 / posts:.2f} µs a post; rounds (CPU s): {', '.join(f'{r[0]:.3f}' for r in runs)}")
    return cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/15", help="a database this bench may flush")
    parser.add_argument("--against", type=Path, help="another checkpoint script, run beside this checkout's")
    parser.add_argument("--kinds", action="store_true",
                        help="also run this checkout's script without each key family: what each costs")
    parser.add_argument("--rate", type=int, default=3750, help="posts a simulated second in the partition")
    parser.add_argument("--seconds", type=int, default=60, help="simulated seconds (one checkpoint each)")
    parser.add_argument("--history-posts", type=int, default=0,
                        help=f"posts an hour fed over the {HISTORY_HOURS} hours before, checkpointed once and "
                        "not measured (0: none, the state starts empty)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    settings = Settings()
    keys = KeySpace.of(settings)
    first, made, posts = payloads(settings, args.rate, args.seconds, args.history_posts)
    total = sum(p.writes + len(p.deletes) for p in made)
    print(f"{len(made)} checkpoints of {posts:,} posts: {total:,} keys written or deleted "
          f"({total / len(made):,.0f} a checkpoint); a checkpoint by family (keys, bytes written): "
          + ", ".join(f"{kind} {n:,} {size / 1e3:,.0f} KB" for kind, (n, size) in breakdown(made, keys).items()))
    client = redis.Redis.from_url(args.redis)
    script = SCRIPT_PATH.read_text()
    sides = {"ours": (script, made)}
    if args.against:
        sides["against"] = (args.against.read_text(), made)
    if args.kinds:
        sides.update({f"without {kind}": (script, [without(p, keys, kind) for p in made])
                      for kind in breakdown(made, keys)})
    found: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, (source, payloads_) in sides.items():
            found[name].append(run(client, source, first, payloads_))
    client.flushdb()
    ours = report("ours", found.pop("ours"), posts, len(made))
    for name, runs in found.items():
        cpu = report(name, runs, posts, len(made))
        if name.startswith("without"):
            print(f"{'':12s} -> {name[8:]} costs {(ours - cpu) * 1e6 / posts:.2f} µs a post "
                  f"({(ours - cpu) / ours:.0%} of the step)")


if __name__ == "__main__":
    main()
