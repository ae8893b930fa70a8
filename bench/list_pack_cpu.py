"""A worker's CPU for one partition's checkpoints (`Checkpointer.prepare`: the entries, lists packed or not) and
for feeding it posts, in one checkout: run it for two checkouts in turn and compare (issue #24's memory work).

Run: .venv/bin/python bench/list_pack_cpu.py CHECKOUT RATE SECONDS   (e.g. /tmp/old 3750 90: the freshness
     run's 15,000 posts/s over 4 partitions, a checkpoint a simulated second, fed as bench/checkpoint_bench.py
     feeds them)
Pure CPU (process time): no Kafka, no Redis.
"""

from __future__ import annotations

import importlib.util
import sys
import time


def main(checkout: str, rate: int, seconds: int) -> None:
    sys.path.insert(0, checkout)  # that checkout's packages, before this one's
    spec = importlib.util.spec_from_file_location("checkpoint_bench", f"{checkout}/bench/checkpoint_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    from speed.cells import CellCache
    from speed.checkpoint import Checkpointer, Owned, SeenIds
    from speed.state import PartitionState, StateLimits
    from trendcore.keys import KeySpace
    from trendcore.settings import Settings
    from trends.gen.model import GenConfig, Stream

    settings = Settings()
    speed, keys = settings.speed, KeySpace.of(settings)
    start_ms = (int(time.time()) - seconds) * 1000
    owned = Owned("posts", 0, stored=0, fresh=True, seen=SeenIds(speed.seen_post_ids),
                  state=PartitionState(settings.sketch.shape, StateLimits.of(speed), keys))
    cells, checkpointer = CellCache(settings.sketch.shape), Checkpointer(keys, speed.post_ttl_s)
    live = bench.posts_of(Stream(GenConfig(seed=7, start_ms=start_ms, event_rate=rate,
                                           wall_now_ms=start_ms + seconds * 1000, engagements_per_post=0)))
    feed_s = prepare_s = 0.0
    lists = list_bytes = 0
    for second in range(seconds):
        clock = start_ms + (second + 1) * 1000
        started = time.process_time()
        bench.feed(owned, live, settings, cells, rate, clock)
        fed = time.process_time()
        payload = checkpointer.prepare(owned, clock)
        feed_s, prepare_s = feed_s + fed - started, prepare_s + time.process_time() - fed
        written = [e for e in payload.entries if keys.parse_part(e.key)[1] in ("new", "top")]
        lists, list_bytes = lists + len(written), list_bytes + sum(len(e.value) for e in written)
        Checkpointer.settle(owned, payload, clock)
    posts = rate * seconds
    print(f"{checkout}: feed {feed_s / posts * 1e6:.2f} µs a post, prepare {prepare_s / posts * 1e6:.2f} µs a post, "
          f"lists written {lists:,} ({list_bytes / max(lists, 1):,.0f} B each)")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
