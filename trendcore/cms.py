"""Count-min sketch math: shape from (eps, delta), cell positions, estimates, merge, bytes.

The counters are u32 in big-endian order, the layout Redis BITFIELD uses for `u32 #i`, so a
sketch read back from Redis with GET can be queried and merged here (notebooks, tests, batch).
Estimates never undercount: true <= estimate <= true + eps * N with probability 1 - delta.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Iterable
from dataclasses import dataclass

import mmh3

_U32_MAX = 2**32 - 1


@dataclass(frozen=True, slots=True)
class SketchShape:
    """Width and depth of a sketch; `from_error` derives them from the error guarantees."""

    width: int
    depth: int

    @classmethod
    def from_error(cls, eps: float, delta: float) -> SketchShape:
        """width = ceil(e / eps), depth = ceil(ln(1 / delta))."""
        if not 0 < eps < 1 or not 0 < delta < 1:
            raise ValueError("eps and delta must lie strictly between 0 and 1")
        return cls(math.ceil(math.e / eps), math.ceil(math.log(1 / delta)))

    @property
    def cells(self) -> int:
        return self.width * self.depth

    @property
    def nbytes(self) -> int:
        """Memory of one sketch: 4 bytes a counter."""
        return 4 * self.cells


def cell_indexes(key: str, shape: SketchShape) -> list[int]:
    """The `depth` flat counter indexes (row * width + column) of a key; one hash per key.

    Double hashing (Kirsch-Mitzenmacher) on one 128-bit MurmurHash3: column_i = h1 + i * h2.
    """
    h1, h2 = mmh3.hash64(key.encode("utf-8"), signed=False)
    h2 |= 1
    width = shape.width
    return [row * width + (h1 + row * h2) % width for row in range(shape.depth)]


class CountMinSketch:
    """An in-memory sketch with the same cells as the Redis one."""

    __slots__ = ("shape", "counters")

    def __init__(self, shape: SketchShape, counters: array | None = None) -> None:
        self.shape = shape
        self.counters = counters if counters is not None else array("I", bytes(shape.nbytes))
        if len(self.counters) != shape.cells:
            raise ValueError(f"expected {shape.cells} counters, got {len(self.counters)}")

    def add(self, key: str, count: int = 1) -> None:
        """Add `count` to the key's cells, saturating at 2**32 - 1 as BITFIELD OVERFLOW SAT does."""
        counters = self.counters
        for index in cell_indexes(key, self.shape):
            counters[index] = min(_U32_MAX, counters[index] + count)

    def estimate(self, key: str) -> int:
        """The minimum over the key's cells: never below the true count."""
        return min(self.counters[i] for i in cell_indexes(key, self.shape))

    def merge(self, other: CountMinSketch) -> None:
        """Add another sketch of the same shape cell by cell (union of the two streams)."""
        if other.shape != self.shape:
            raise ValueError("cannot merge sketches of different shapes")
        self.counters = array("I", (min(_U32_MAX, a + b) for a, b in zip(self.counters, other.counters, strict=True)))

    def total(self) -> int:
        """N, the number of increments: any one row's sum."""
        return sum(self.counters[: self.shape.width])

    def to_bytes(self) -> bytes:
        """Big-endian u32 counters, as Redis stores a BITFIELD u32 string."""
        data = array("I", self.counters)
        if sys.byteorder == "little":
            data.byteswap()
        return data.tobytes()

    @classmethod
    def from_bytes(cls, shape: SketchShape, raw: bytes | None) -> CountMinSketch:
        """Read a sketch from Redis bytes (see `decode_counters`)."""
        return cls(shape, decode_counters(shape, raw))


def decode_counters(shape: SketchShape, raw: bytes | None) -> array:
    """A Redis sketch string as native u32 counters: the one decoding of sketch bytes.

    Big-endian u32 per cell; a missing or short string reads as zeros past its end, bytes past
    `shape.nbytes` are ignored (what BITFIELD GET would read from the same string).
    """
    raw = (raw or b"")[: shape.nbytes]
    raw = raw + bytes(shape.nbytes - len(raw))
    counters = array("I")
    counters.frombytes(raw)
    if sys.byteorder == "little":
        counters.byteswap()
    return counters


def window_estimate(sketches: Iterable[CountMinSketch], key: str) -> int:
    """Window estimate: the sum of per-bucket minima (tighter than the minimum of sums, never low)."""
    return sum(sketch.estimate(key) for sketch in sketches)


def error_bound(eps: float, total: int) -> int:
    """eps * N rounded up: how far above the truth an estimate may be (with probability 1 - delta)."""
    return math.ceil(eps * total)
