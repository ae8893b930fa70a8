"""A partition's count-min counters as bytes (issue #24): a whole sketch, then the cells changed since, appended.

A stored value is a sum: an optional dense part, then any number of chunks, each adding to its cells.

- `D`: every u32 counter (a whole sketch, when most cells are set).
- `+`: a chunk: u32 count, then that many cell indexes (u16 when the shape has at most 65,536 cells, else
  u32), ascending, then their u32 amounts. A whole sparse sketch is one chunk from zero; a checkpoint that
  changed a few cells of a bucket Redis already holds APPENDs one chunk of those cells' increments instead of
  rewriting the sketch (a closed hour's dense sketch is 54 KB; a late record changes a handful of cells).
- `S` (written before the chunks): the nonzero cells' indexes, then their values, to the end of the value.
  Still read; never appended to.

All little-endian; the sum saturates at 2**32 - 1. These blobs are the partition checkpoints' own format; the
merged sketches readers query stay big-endian (trendcore.cms).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from trendcore.cms import SketchShape

DENSE, SPARSE, CHUNK = b"D", b"S", b"+"
U32_MAX = 2**32 - 1
_VALUE = np.dtype("<u4")


def _index_dtype(shape: SketchShape) -> np.dtype:
    """u16 indexes when every cell fits in one, else u32."""
    return np.dtype("<u2") if shape.cells <= 2**16 else np.dtype("<u4")


def encode(counters: np.ndarray, shape: SketchShape) -> bytes:
    """`counters` (u32, one per cell of `shape`) as a whole blob: dense, or one chunk from zero when smaller."""
    if counters.shape != (shape.cells,):
        raise ValueError(f"expected {shape.cells} counters, got an array of shape {counters.shape}")
    nonzero = np.flatnonzero(counters)
    if 4 + len(nonzero) * (_index_dtype(shape).itemsize + 4) < 4 * shape.cells:
        return chunk(nonzero, counters[nonzero], shape)
    return DENSE + counters.astype(_VALUE).tobytes()


def chunk(cells: np.ndarray, amounts: np.ndarray, shape: SketchShape) -> bytes:
    """A chunk adding `amounts` (each at most 2**32 - 1) to `cells` (distinct, ascending)."""
    return (CHUNK + len(cells).to_bytes(4, "little") + np.asarray(cells).astype(_index_dtype(shape)).tobytes()
            + np.asarray(amounts).astype(_VALUE).tobytes())


def appendable(blob: bytes) -> bool:
    """True when a chunk appended to `blob` reads back as their sum (not a pre-chunk `S` blob)."""
    return blob[:1] in (DENSE, CHUNK)


def decode(blob: bytes, shape: SketchShape) -> np.ndarray:
    """The u32 counters of a blob, its chunks summed (a new writable array); ValueError when it does not fit
    `shape`."""
    kind, body = blob[:1], memoryview(blob)[1:]
    if kind == SPARSE:
        return _decode_sparse(body, shape)
    total, at = np.zeros(shape.cells, dtype=np.uint64), 0
    if kind == DENSE:
        if len(body) < 4 * shape.cells:
            raise ValueError(f"dense sketch blob of {len(body)} bytes, expected {4 * shape.cells} for {shape}")
        total += np.frombuffer(body, dtype=_VALUE, count=shape.cells)
        at = 1 + 4 * shape.cells
    elif kind != CHUNK:
        raise ValueError(f"unknown sketch blob format {bytes(kind)!r}")
    while at < len(blob):
        at = _add_chunk(total, blob, at, shape)
    return np.minimum(total, U32_MAX).astype(np.uint32)


def _add_chunk(total: np.ndarray, blob: bytes, at: int, shape: SketchShape) -> int:
    """Add the chunk at byte `at` to `total` (u64); the byte after it. ValueError when it is not whole or names
    a cell outside the shape."""
    index = _index_dtype(shape)
    if blob[at:at + 1] != CHUNK or at + 5 > len(blob):
        raise ValueError(f"sketch blob: no chunk at byte {at} of {len(blob)}")
    count = int.from_bytes(blob[at + 1:at + 5], "little")
    end = at + 5 + count * (index.itemsize + 4)
    if end > len(blob):
        raise ValueError(f"sketch blob: a chunk of {count} cells at byte {at} runs past its {len(blob)} bytes")
    cells = np.frombuffer(blob, dtype=index, count=count, offset=at + 5)
    if count and int(cells.max()) >= shape.cells:
        raise ValueError(f"sketch blob names cell {int(cells.max())}, {shape} has {shape.cells}")
    np.add.at(total, cells, np.frombuffer(blob, dtype=_VALUE, count=count, offset=at + 5 + count * index.itemsize))
    return end


def _decode_sparse(body: memoryview, shape: SketchShape) -> np.ndarray:
    """Scatter the (index, value) pairs of a pre-chunk sparse blob into zeros, refusing indexes out of the shape."""
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
