"""Redis's cost of the checkpoint step (speed/checkpoint.lua), this checkout's script against another, side by side.

Run: .venv/bin/python bench/checkpoint_bench.py --redis redis://127.0.0.1:28079/15 --against OLD.lua
     (OLD.lua, e.g. from `git show <rev>:speed/checkpoint.lua > /tmp/old.lua`)

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
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: the checkout's packages

from speed.aggregate import parse_batch, step_increments  # noqa: E402
from speed.cells import CellCache  # noqa: E402
from speed.checkpoint import SCRIPT_PATH, Checkpointer, CheckpointPayload, Owned, SeenIds  # noqa: E402
from speed.state import PartitionState, StateLimits  # noqa: E402
from trendcore.keys import KeySpace  # noqa: E402
from trendcore.post_lists import right_sized  # noqa: E402
from trendcore.settings import Settings  # noqa: E402
from trends.gen.model import GenConfig, Stream  # noqa: E402


def payloads(settings: Settings, rate: int, seconds: int) -> tuple[list[CheckpointPayload], int]:
    """One partition's checkpoints, a simulated second each, of `rate` posts a second ending now (the keys'
    expiry is real time); and the posts fed."""
    speed, shape, keys = settings.speed, settings.sketch.shape, KeySpace.of(settings)
    start_ms = (int(time.time()) - seconds) * 1000
    stream = Stream(GenConfig(seed=7, start_ms=start_ms, event_rate=rate, wall_now_ms=start_ms + seconds * 1000,
                              engagements_per_post=0))
    rows = (right_sized(r.value) for r in stream.records() if r.topic == "posts")
    owned = Owned("posts", 0, stored=0, fresh=True, state=PartitionState(shape, StateLimits.of(speed), keys),
                  seen=SeenIds(speed.seen_post_ids))
    cells, made = CellCache(shape), []
    checkpointer = Checkpointer(keys, speed.post_ttl_s)
    for second in range(seconds):
        batch = [(owned.next_offset + i, b"k", next(rows)) for i in range(rate)]
        clock = start_ms + (second + 1) * 1000
        parsed = parse_batch(batch, "post", clock, settings.validation.max_future_s * 1000)
        known = frozenset(owned.seen.known(p.post_id for p in parsed.posts))
        owned.state.add(step_increments("post", parsed, known, clock, speed.keep_minutes, speed.keep_hours, {}),
                        cells)
        owned.seen.add([p.post_id for p in parsed.posts if p.post_id not in known], parsed.start)
        owned.next_offset += rate
        payload = checkpointer.prepare(owned, clock)
        made.append(payload)
        Checkpointer.settle(owned, payload, clock)
    return made, rate * seconds


def evalsha_usec(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("usec", 0))


def cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def run(client: redis.Redis, source: str, made: list[CheckpointPayload]) -> tuple[float, float]:
    """Submit every payload with the script `source` on the flushed database: (Redis CPU s, evalsha s)."""
    client.flushdb()
    script = client.register_script(source)
    cpu, usec = cpu_s(client), evalsha_usec(client)
    for payload in made:
        Checkpointer.outcome(script(keys=payload.keys(), args=payload.args()))
    return cpu_s(client) - cpu, (evalsha_usec(client) - usec) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/15", help="a database this bench may flush")
    parser.add_argument("--against", type=Path, required=True, help="the other checkpoint script")
    parser.add_argument("--rate", type=int, default=3750, help="posts a simulated second in the partition")
    parser.add_argument("--seconds", type=int, default=60, help="simulated seconds (one checkpoint each)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    made, posts = payloads(Settings(), args.rate, args.seconds)
    keys = sum(p.writes + len(p.deletes) for p in made)
    print(f"{len(made)} checkpoints of {posts:,} posts: {keys:,} keys written or deleted "
          f"({keys / len(made):,.0f} a checkpoint)")
    client = redis.Redis.from_url(args.redis)
    sides = {"ours": SCRIPT_PATH.read_text(), "against": args.against.read_text()}
    found: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, source in sides.items():
            found[name].append(run(client, source, made))
    client.flushdb()
    for name, runs in found.items():
        cpu, usec = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        print(f"{name:8s} Redis CPU {cpu * 1e6 / posts:.2f} µs a post ({cpu * 1e3 / len(made):.2f} ms a checkpoint), "
              f"evalsha {usec * 1e6 / posts:.2f} µs a post; rounds (CPU s): "
              f"{', '.join(f'{r[0]:.3f}' for r in runs)}")


if __name__ == "__main__":
    main()
