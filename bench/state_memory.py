"""One partition's speed state in memory, without Kafka or Redis: how its resident memory fills over time.

Run: .venv/bin/python bench/state_memory.py [--minutes 5] [--rate 1250]
Feeds a PartitionState, its SeenIds and a CellCache (what a worker holds per partition) the generator's posts
at `--rate` posts a simulated second (1,250: 5,000 posts/s over 4 partitions), each second as one step with
a checkpoint, as speed/worker.py does, and prints the process's RSS above the pregenerated stream each
simulated minute with what the state holds. The generator's late records (2%, up to 3 hours late) open
buckets of past minutes and hours, as on the live stream.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: the checkout's packages

from speed.aggregate import parse_batch, step_increments  # noqa: E402
from speed.cells import CellCache  # noqa: E402
from speed.checkpoint import SeenIds  # noqa: E402
from speed.state import PartitionState, StateLimits  # noqa: E402
from trendcore.keys import KeySpace  # noqa: E402
from trendcore.post_lists import right_sized  # noqa: E402
from trendcore.settings import Settings  # noqa: E402
from trends.gen.model import GenConfig, Stream  # noqa: E402

START_MS = 1_790_000_000_000


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def pregenerated(rate: int, minutes: int) -> list[tuple[bytes, bytes]]:
    """The posts records (key, value) of `minutes` at `rate`, made before the clock starts."""
    stream = Stream(GenConfig(seed=7, start_ms=START_MS, event_rate=rate, wall_now_ms=START_MS,
                              engagements_per_post=0))
    rows: list[tuple[bytes, bytes]] = []
    for record in stream.records():
        if record.topic == "posts":
            rows.append((record.key, right_sized(record.value)))
            if len(rows) == rate * 60 * minutes:
                return rows
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=int, default=5, help="simulated minutes")
    parser.add_argument("--rate", type=int, default=1250, help="posts a simulated second in this partition")
    args = parser.parse_args()
    settings = Settings()
    speed, shape = settings.speed, settings.sketch.shape
    rows = iter(pregenerated(args.rate, args.minutes))
    gc.collect()
    state = PartitionState(shape, StateLimits.of(speed), KeySpace.of(settings))
    cells, seen = CellCache(shape), SeenIds(speed.seen_post_ids)
    base, began, offset = rss_mb(), time.monotonic(), 0
    print(f"{args.rate:,} posts a simulated second for {args.minutes} minutes; RSS {base:,.0f} MB with the stream")
    for second in range(args.minutes * 60):
        batch = [(offset + i, *next(rows)) for i in range(args.rate)]
        offset += args.rate
        clock = START_MS + (second + 1) * 1000
        parsed = parse_batch(batch, "post", clock, settings.validation.max_future_s * 1000)
        known = frozenset(seen.known(p.post_id for p in parsed.posts))
        inc = step_increments("post", parsed, known, clock, speed.keep_minutes, speed.keep_hours, {})
        state.add(inc, cells)
        seen.add([p.post_id for p in parsed.posts if p.post_id not in known], parsed.start)
        state.expire(clock)
        state.checkpoint(0)
        seen.checkpoint()
        if (second + 1) % 60 == 0:
            sketches = sum(b.counters.nbytes for b in state.buckets.values()) / 2**20
            print(f"minute {(second + 1) // 60}: state {rss_mb() - base:,.0f} MB above the stream; "
                  f"{len(state.buckets):,} buckets ({sketches:,.1f} MB of counters), "
                  f"{sum(map(len, state.authors.values())):,} author sketches, {len(state.book.held):,} post bodies, "
                  f"{seen.held + len(seen.pending):,} seen ids, {len(cells.cells):,} cached tags "
                  f"({time.monotonic() - began:,.0f} s)", flush=True)


if __name__ == "__main__":
    main()
