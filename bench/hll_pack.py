"""Author sketches plain and packed (trendcore.hll): bytes, and the time to write and read each form.

A partition packs a sketch once, when it stops changing; the merger packs the merged one when every
partition's is packed; the API and the materializer read them for every count of distinct authors. Both
forms are timed in the same process, interleaved, so their ratio is what to read on a shared machine.

    .venv/bin/python bench/hll_pack.py
"""

from __future__ import annotations

import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trendcore.hll import HyperLogLog, hash_values  # noqa: E402

AUTHORS = (20, 200, 1_000, 5_000, 100_000)
NUMBER = 2_000


def _us(call, rounds: int = 3) -> float:
    """Best of `rounds` timings of NUMBER calls, in µs a call."""
    return min(timeit.repeat(call, number=NUMBER, repeat=rounds)) / NUMBER * 1e6


def main() -> None:
    hashes = hash_values(f"user-{i}" for i in range(max(AUTHORS)))
    print("authors | plain bytes | packed bytes | write plain / packed µs | read plain / packed µs")
    for n in AUTHORS:
        sketch = HyperLogLog(12)
        sketch.add_hashes(hashes[:n])
        plain, packed = sketch.to_bytes(), sketch.to_bytes(packed=True)
        write = _us(sketch.to_bytes), _us(lambda s=sketch: s.to_bytes(packed=True))
        read = _us(lambda b=plain: HyperLogLog.from_bytes(b)), _us(lambda b=packed: HyperLogLog.from_bytes(b))
        print(f"{n:>7,} | {len(plain):>11,} | {len(packed):>12,} ({len(packed) / len(plain):.2f}) | "
              f"{write[0]:.1f} / {write[1]:.1f} | {read[0]:.1f} / {read[1]:.1f}")


if __name__ == "__main__":
    main()
