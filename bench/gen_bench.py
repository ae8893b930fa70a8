"""Load generator throughput: generation alone, and generation + producing to the local Kafka.

Run with the stack up (`make demo` or `.venv/bin/trends up`):
    .venv/bin/python bench/gen_bench.py [--posts 200000]
"""

from __future__ import annotations

import argparse
import time

from trendcore.settings import Settings
from trends.gen.model import GenConfig, Stream
from trends.gen.run import produce


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--posts", type=int, default=200_000)
    args = parser.parse_args()
    now = int(time.time() * 1000)
    config = GenConfig(seed=1, start_ms=now, wall_now_ms=now)
    stream = Stream(config)
    started = time.perf_counter()
    records = sum(1 for _ in stream.records(args.posts))
    alone = time.perf_counter() - started
    print(f"generate only      : {args.posts / alone:>9,.0f} posts/s ({records / alone:,.0f} records/s)")
    result = produce(Stream(config), Settings(), count=args.posts)
    records_per_s = result.records / result.seconds
    print(f"generate + produce : {result.posts_per_s:>9,.0f} posts/s ({records_per_s:,.0f} records/s)")


if __name__ == "__main__":
    main()
