"""Prototype for issue #24: a checkpoint that appends a bucket sketch's changed cells instead of rewriting the
whole sketch, measured against today's checkpoint step on the same payloads.

Run: .venv/bin/python bench/proto_sketch_deltas.py --redis redis://127.0.0.1:28079/15 --history-posts 100000

In the steady state a partition's checkpoint rewrites about 137 bucket sketches a second, 4.8 MB: the current
minute and hour, and every older bucket a late record touched, each whole (a closed hour's sketch is dense,
54 KB, for a few changed cells). The prototype APPENDs a delta chunk instead (`+`, u32 count, u16 cell
indexes, u32 increments: the cells changed since the key's last write), and writes the whole sketch again only
when the appended chunks would pass its own size (so a stored value is at most twice its compact form). Reading
a value means summing its chunks; the script tells a delta from a whole sketch by its first byte. Everything
else in the step is as today. Only the step's Redis side is measured.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: the checkout's packages

from bench.checkpoint_bench import payloads, report, run  # noqa: E402
from speed.checkpoint import SCRIPT_PATH, CheckpointPayload  # noqa: E402
from speed.state import Entry  # noqa: E402
from trendcore import sketch_blob  # noqa: E402
from trendcore.cms import SketchShape  # noqa: E402
from trendcore.keys import KeySpace  # noqa: E402
from trendcore.settings import Settings  # noqa: E402

DELTA = b"+"

# today's step, with one change: a value that starts with DELTA is APPENDed (the key keeps its expiry and its
# index entry), any other is SET as today
TODAY_SET = "  redis.call('SET', key, ARGV[11 + 2 * i], 'EXAT', expire_at)\n"
PROTO = SCRIPT_PATH.read_text().replace(
    TODAY_SET,
    "  local value = ARGV[11 + 2 * i]\n"
    "  if string.byte(value, 1) == 43 then redis.call('APPEND', key, value)\n"
    "  else redis.call('SET', key, value, 'EXAT', expire_at) end\n")


def delta_chunk(before: np.ndarray, after: np.ndarray) -> bytes:
    """The cells that grew from `before` to `after`, as an appendable chunk."""
    cells = np.flatnonzero(after != before)
    return (DELTA + len(cells).to_bytes(4, "little") + cells.astype("<u2").tobytes()
            + (after[cells] - before[cells]).astype("<u4").tobytes())


class Deltas:
    """Turns each payload's sketch writes into delta chunks where that is smaller, remembering per key what
    Redis holds (its counters and stored bytes), as a worker would."""

    def __init__(self, keys: KeySpace, shape: SketchShape) -> None:
        self.keys, self.shape = keys, shape
        self.held: dict[str, tuple[np.ndarray, int, int]] = {}  # key -> (counters held, bytes, whole sketch's)
        self.expire_at: dict[str, int] = {}
        self.appended = self.rewritten = 0

    def convert(self, payload: CheckpointPayload) -> CheckpointPayload:
        return replace(payload, entries=tuple(self._entry(e) for e in payload.entries))

    def _entry(self, entry: Entry) -> Entry:
        if self.keys.parse_part(entry.key)[1] != "cms":
            return entry
        counters = sketch_blob.decode(entry.value, self.shape)
        self.expire_at[entry.key] = entry.expire_at_s
        held = self.held.get(entry.key)
        if held is not None:
            chunk = delta_chunk(held[0], counters)
            if held[1] + len(chunk) <= 2 * len(entry.value):
                self.held[entry.key] = (counters, held[1] + len(chunk), held[2])
                self.appended += 1
                return Entry(entry.key, chunk, entry.expire_at_s)
        self.held[entry.key] = (counters, len(entry.value), len(entry.value))
        self.rewritten += 1
        return entry


def stored_counters(value: bytes, base: int, shape: SketchShape) -> np.ndarray:
    """The counters a stored value says: its whole sketch (its first `base` bytes) plus the delta chunks after."""
    counters, at = sketch_blob.decode(value[:base], shape).astype(np.uint64), base
    while at < len(value):
        if value[at:at + 1] != DELTA:
            raise ValueError(f"no delta chunk at byte {at}")
        count = int.from_bytes(value[at + 1:at + 5], "little")
        cells = np.frombuffer(value, "<u2", count, at + 5)
        counters[cells] += np.frombuffer(value, "<u4", count, at + 5 + 2 * count)
        at += 5 + 6 * count
    return counters.astype(np.uint32)


def check(client: redis.Redis, keys: KeySpace, shape: SketchShape, first, proto: list[CheckpointPayload],
          deltas: Deltas) -> None:
    """After the prototype's steps, every sketch key sums to the counters today's step would have written."""
    run(client, PROTO, first, proto)
    live = {k: held for k, held in deltas.held.items() if deltas.expire_at[k] > time.time() + 5}
    wrong = [k for k, (counters, _, base) in live.items()
             if not np.array_equal(stored_counters(client.get(k), base, shape), counters)]
    if wrong:
        raise SystemExit(f"the prototype's sketches differ from today's in {len(wrong)} of {len(live)} keys")
    print(f"checked: each of {len(live):,} live sketch keys sums to today's counters (expired meanwhile: "
          f"{len(deltas.held) - len(live):,})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/15", help="a database this bench may flush")
    parser.add_argument("--rate", type=int, default=3750)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--history-posts", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if TODAY_SET not in SCRIPT_PATH.read_text():
        raise SystemExit(f"{SCRIPT_PATH.name} no longer writes a key as this prototype expects")
    settings = Settings()
    keys, shape = KeySpace.of(settings), settings.sketch.shape
    first, made, posts = payloads(settings, args.rate, args.seconds, args.history_posts)
    deltas = Deltas(keys, shape)
    if first is not None:
        first = deltas.convert(first)
    proto = [deltas.convert(p) for p in made]
    size = sum(len(e.value) for p in made for e in p.entries)
    proto_size = sum(len(e.value) for p in proto for e in p.entries)
    print(f"{len(made)} checkpoints; bytes written a checkpoint: today {size / len(made) / 1e6:.2f} MB, prototype "
          f"{proto_size / len(made) / 1e6:.2f} MB; sketch writes appended {deltas.appended:,}, whole "
          f"{deltas.rewritten:,}")
    client = redis.Redis.from_url(args.redis)
    found: dict[str, list] = {"today": [], "sketch deltas": []}
    for _ in range(args.rounds):
        found["today"].append(run(client, SCRIPT_PATH.read_text(), first, made))
        found["sketch deltas"].append(run(client, PROTO, first, proto))
    check(client, keys, shape, first, proto, deltas)
    client.flushdb()
    base = report("today", found["today"], posts, len(made))
    cpu = report("sketch deltas", found["sketch deltas"], posts, len(made))
    print(f"sketch deltas / today: {cpu / base:.2f}")


if __name__ == "__main__":
    main()
