"""Partition sketch blobs (issue #24): dense or one chunk, whichever is smaller; chunks appended after either read
back as the sum; pre-chunk sparse blobs still read; shape checked; saturating sums."""

from __future__ import annotations

import numpy as np
import pytest

from trendcore import sketch_blob
from trendcore.cms import SketchShape
from trendcore.sketch_blob import U32_MAX, decode, encode, merge_sum, saturating_add

SHAPE = SketchShape(width=2719, depth=5)


def _counters(nonzero: int, seed: int = 1, shape: SketchShape = SHAPE) -> np.ndarray:
    rng = np.random.default_rng(seed)
    counters = np.zeros(shape.cells, dtype=np.uint32)
    counters[rng.choice(shape.cells, nonzero, replace=False)] = rng.integers(1, U32_MAX, nonzero, dtype=np.uint32)
    return counters


@pytest.mark.parametrize("nonzero", [0, 1, 50, 8_000, SHAPE.cells])
def test_round_trip_in_the_smaller_format(nonzero):
    counters = _counters(nonzero)
    blob = encode(counters, SHAPE)
    dense_size, sparse_size = 1 + 4 * SHAPE.cells, 5 + 6 * nonzero
    assert blob[:1] == (sketch_blob.CHUNK if sparse_size < dense_size else sketch_blob.DENSE)
    assert len(blob) == min(dense_size, sparse_size)
    back = decode(blob, SHAPE)
    assert back.dtype == np.uint32 and np.array_equal(back, counters)
    back[0] += 1  # a writable copy, not a view on the bytes


def test_a_shape_over_65536_cells_uses_u32_indexes():
    shape = SketchShape(width=30_000, depth=3)
    counters = _counters(10, shape=shape)
    blob = encode(counters, shape)
    assert blob[:1] == sketch_blob.CHUNK and len(blob) == 5 + 8 * 10
    assert np.array_equal(decode(blob, shape), counters)


def test_the_bytes_are_little_endian_whatever_the_machine():
    counters = np.zeros(SHAPE.cells, dtype=np.uint32)
    counters[3] = 0x01020304
    assert encode(counters, SHAPE) == b"+" + bytes([1, 0, 0, 0]) + bytes([3, 0]) + bytes([4, 3, 2, 1])


@pytest.mark.parametrize("blob, message", [
    (b"D" + bytes(4 * SHAPE.cells - 4), "dense sketch blob of 54376 bytes, expected 54380"),
    (b"S" + bytes(7), "not whole"),
    (b"S" + np.array([SHAPE.cells], dtype="<u2").tobytes() + bytes(4), "names cell 13595"),
    (b"X" + bytes(6), "unknown sketch blob format"),
    (b"+" + bytes([2, 0, 0, 0]) + bytes(6), "runs past"),
    (b"+" + bytes([1, 0, 0, 0]) + np.array([SHAPE.cells], dtype="<u2").tobytes() + bytes(4), "names cell 13595"),
    (b"D" + bytes(4 * SHAPE.cells) + b"x", "no chunk at byte 54381"),
    (b"+" + bytes(4) + b"+" + bytes(2), "no chunk at byte 5"),
    (b"", "unknown sketch blob format"),
])
def test_a_blob_that_does_not_fit_the_shape_is_refused(blob, message):
    with pytest.raises(ValueError, match=message):
        decode(blob, SHAPE)


def test_a_dense_blob_of_another_shape_is_refused():
    other = SketchShape(width=2000, depth=5)
    with pytest.raises(ValueError, match="expected 54380"):
        decode(encode(np.ones(other.cells, dtype=np.uint32), other), SHAPE)
    with pytest.raises(ValueError, match="expected 13595 counters"):
        encode(np.ones(other.cells, dtype=np.uint32), SHAPE)


def test_merge_sums_the_partitions_and_skips_missing_ones():
    parts = [_counters(40, seed) for seed in range(3)]
    parts = [np.minimum(p, 1_000_000) for p in parts]
    merged = merge_sum([encode(p, SHAPE) for p in parts] + [None], SHAPE)
    assert merged.dtype == np.uint32
    assert np.array_equal(merged, sum(p.astype(np.uint64) for p in parts))
    assert not merge_sum([], SHAPE).any()


def test_merge_and_add_saturate_instead_of_wrapping():
    near = np.zeros(SHAPE.cells, dtype=np.uint32)
    near[[0, 1]] = U32_MAX - 1
    merged = merge_sum([encode(near, SHAPE)] * 3, SHAPE)
    assert merged[0] == merged[1] == U32_MAX and merged[2] == 0
    saturating_add(near, np.array([0, 2]), np.array([5, 7]))
    assert near[0] == U32_MAX and near[1] == U32_MAX - 1 and near[2] == 7


def test_chunks_appended_to_a_whole_blob_read_back_as_the_sum():
    for whole in (_counters(SHAPE.cells), _counters(30)):  # dense, and one chunk from zero
        whole = np.minimum(whole, 1_000)
        blob = encode(whole, SHAPE)
        assert sketch_blob.appendable(blob)
        added = np.array([0, 7, 13_594]), np.array([5, 1, U32_MAX])
        again = np.array([7]), np.array([2])
        stored = blob + sketch_blob.chunk(*added, SHAPE) + sketch_blob.chunk(*again, SHAPE)
        expected = whole.astype(np.uint64)
        expected[[0, 7, 13_594]] += np.array([5, 3, U32_MAX], dtype=np.uint64)
        assert np.array_equal(decode(stored, SHAPE), np.minimum(expected, U32_MAX))  # saturated, not wrapped
    assert np.array_equal(decode(sketch_blob.chunk(np.array([], dtype=int), np.array([]), SHAPE), SHAPE),
                          np.zeros(SHAPE.cells, dtype=np.uint32))


def test_a_sparse_blob_from_before_the_chunks_still_reads_and_is_never_appended_to():
    counters = _counters(20)
    nonzero = np.flatnonzero(counters)
    old = b"S" + nonzero.astype("<u2").tobytes() + counters[nonzero].astype("<u4").tobytes()
    assert np.array_equal(decode(old, SHAPE), counters) and not sketch_blob.appendable(old)
