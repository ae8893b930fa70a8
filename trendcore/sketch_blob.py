"""A partition's count-min counters as bytes (issue #24): dense or sparse, whichever is smaller.

Format: one tag byte, then little-endian data. `D`: every u32 counter. `S`: the nonzero counters'
indexes (u16 when the shape has at most 65,536 cells, else u32), ascending, then their u32 values. A
minute of one region touches few of its cells: sparse saves most bytes there. These blobs are the
partition checkpoints' own format; the merged sketches readers query stay big-endian (trendcore.cms).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from trendcore.cms import SketchShape

DENSE, SPARSE = b"D", b"S"
U32_MAX = 2**32 - 1
_VALUE = np.dtype("<u4")


def _index_dtype(shape: SketchShape) -> np.dtype:
    """u16 indexes when every cell fits in one, else u32."""
    return np.dtype("<u2") if shape.cells <= 2**16 else np.dtype("<u4")


def encode(counters: np.ndarray, shape: SketchShape) -> bytes:
    """`counters` (u32, one per cell of `shape`) as a blob, sparse when that is smaller."""
    if counters.shape != (shape.cells,):
        raise ValueError(f"expected {shape.cells} counters, got an array of shape {counters.shape}")
    nonzero = np.flatnonzero(counters)
    index = _index_dtype(shape)
    if len(nonzero) * (index.itemsize + 4) < 4 * shape.cells:
        return SPARSE + nonzero.astype(index).tobytes() + counters[nonzero].astype(_VALUE).tobytes()
    return DENSE + counters.astype(_VALUE).tobytes()


def decode(blob: bytes, shape: SketchShape) -> np.ndarray:
    """The u32 counters of a blob (a new writable array); ValueError when it does not fit `shape`."""
    kind, body = blob[:1], memoryview(blob)[1:]
    if kind == DENSE:
        if len(body) != 4 * shape.cells:
            raise ValueError(f"dense sketch blob of {len(body)} bytes, expected {4 * shape.cells} for {shape}")
        return np.frombuffer(body, dtype=_VALUE).astype(np.uint32)
    if kind == SPARSE:
        return _decode_sparse(body, shape)
    raise ValueError(f"unknown sketch blob format {bytes(kind)!r}")


def _decode_sparse(body: memoryview, shape: SketchShape) -> np.ndarray:
    """Scatter the (index, value) pairs of a sparse blob into zeros, refusing indexes out of the shape."""
    index = _index_dtype(shape)
    width = index.itemsize + 4
    if len(body) % width:
        raise ValueError(f"sparse sketch blob of {len(body)} bytes is not whole ({width} bytes a cell) for {shape}")
    count = len(body) // width
    ids = np.frombuffer(body, dtype=index, count=count)
    if count and int(ids.max()) >= shape.cells:
        raise ValueError(f"sparse sketch blob names cell {int(ids.max())}, {shape} has {shape.cells}")
    counters = np.zeros(shape.cells, dtype=np.uint32)
    counters[ids] = np.frombuffer(body, dtype=_VALUE, offset=count * index.itemsize)
    return counters


def saturating_add(counters: np.ndarray, ids: np.ndarray, amounts: np.ndarray) -> None:
    """counters[ids] += amounts in place, capped at 2**32 - 1 (BITFIELD OVERFLOW SAT); `ids` distinct."""
    summed = counters[ids].astype(np.uint64) + amounts.astype(np.uint64)
    counters[ids] = np.minimum(summed, U32_MAX)


def merge_sum(blobs: Iterable[bytes | None], shape: SketchShape) -> np.ndarray:
    """The cell-wise sum of the partitions' blobs (None: a partition without that bucket), saturating
    at 2**32 - 1 instead of wrapping."""
    total = np.zeros(shape.cells, dtype=np.uint64)
    for blob in blobs:
        if blob is not None:
            total += decode(blob, shape)
            np.minimum(total, U32_MAX, out=total)  # never near 2**64: at most one blob over the cap
    return total.astype(np.uint32)
