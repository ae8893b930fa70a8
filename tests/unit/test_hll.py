"""HyperLogLog in numpy: accuracy within 3 standard errors, merge is union, bytes round trip."""

from __future__ import annotations

import math

import mmh3
import numpy as np
import pytest

from trendcore.hll import HyperLogLog, hash_values, is_packed, registers_of


@pytest.fixture(scope="module")
def million() -> np.ndarray:
    return hash_values(f"user-{i}" for i in range(1_000_000))


@pytest.mark.parametrize("p", [12, 14])
@pytest.mark.parametrize("n", [10_000, 1_000_000])
def test_relative_error_is_within_three_standard_errors(million, p, n):
    sketch = HyperLogLog(p)
    sketch.add_hashes(million[:n])
    assert abs(sketch.estimate() / n - 1) < 3 * 1.04 / math.sqrt(2**p)


def test_small_counts_are_near_exact_and_empty_is_zero():
    sketch = HyperLogLog(12)
    assert sketch.estimate() == 0
    sketch.add(["a", "b", "c", "a"])
    assert round(sketch.estimate()) == 3


def test_merging_two_halves_equals_the_whole(million):
    whole, first, second = HyperLogLog(12), HyperLogLog(12), HyperLogLog(12)
    whole.add_hashes(million[:50_000])
    first.add_hashes(million[:30_000])
    second.add_hashes(million[20_000:50_000])  # overlapping halves: a union, not a sum
    first.merge(second)
    assert np.array_equal(first.registers, whole.registers) and first.estimate() == whole.estimate()
    with pytest.raises(ValueError, match="precision"):
        first.merge(HyperLogLog(10))


@pytest.mark.parametrize("n, kind", [(0, b"S"), (100, b"S"), (100_000, b"D")])
def test_bytes_round_trip_sparse_when_few_registers_are_set(million, n, kind):
    sketch = HyperLogLog(12)
    sketch.add_hashes(million[:n])
    blob = sketch.to_bytes()
    assert blob[:2] == kind + bytes([12])
    back = HyperLogLog.from_bytes(blob)
    assert back.p == 12 and np.array_equal(back.registers, sketch.registers)
    if kind == b"S":
        assert len(blob) == 2 + 3 * np.count_nonzero(sketch.registers)


@pytest.mark.parametrize("n, kind, at_most", [(200, b"s", 0.6), (1_000, b"s", 0.4), (100_000, b"d", 0.5)])
def test_packed_bytes_round_trip_in_about_half_the_bytes(million, n, kind, at_most):
    sketch = HyperLogLog(12)
    sketch.add_hashes(million[:n])
    blob = sketch.to_bytes(packed=True)
    assert blob[:2] == kind + bytes([12]) and is_packed(blob) and not is_packed(sketch.to_bytes())
    assert len(blob) <= at_most * len(sketch.to_bytes())
    assert np.array_equal(HyperLogLog.from_bytes(blob).registers, sketch.registers)


@pytest.mark.parametrize("n", [0, 1, 3])
def test_a_sketch_of_a_few_authors_stays_plain_when_packing_would_not_shrink_it(million, n):
    sketch = HyperLogLog(12)
    sketch.add_hashes(million[:n])
    assert sketch.to_bytes(packed=True) == sketch.to_bytes()


def test_packed_sparse_keeps_register_zero_and_the_last_register():
    sketch = HyperLogLog(12)
    sketch.add_registers(np.array([0, 1, 300, 4095]), np.array([5, 1, 52, 2], dtype=np.uint8))
    sketch.add_hashes(np.arange(1, 120, dtype=np.uint64) << np.uint64(52))  # enough registers to pack
    blob = sketch.to_bytes(packed=True)
    assert blob[:1] == b"s"
    assert np.array_equal(HyperLogLog.from_bytes(blob).registers, sketch.registers)


@pytest.mark.parametrize("blob", [b"s\x0c" + b"not zlib", b"d\x0c" + __import__("zlib").compress(bytes(10)),
                                  b"s\x0c" + __import__("zlib").compress(bytes([1, 0, 0, 0, 1, 1])),
                                  b"s\x0c" + __import__("zlib").compress(bytes([255, 16, 1]))])
def test_malformed_packed_bytes_are_refused(blob):
    with pytest.raises(ValueError):
        HyperLogLog.from_bytes(blob)


@pytest.mark.parametrize("blob", [b"", b"D", b"D\x0c" + bytes(10), b"S\x0c" + bytes(4), b"S\x03", b"Q\x0c",
                                  b"S\x04" + bytes([16, 0, 1])])
def test_malformed_bytes_are_refused(blob):
    with pytest.raises(ValueError):
        HyperLogLog.from_bytes(blob)


@pytest.mark.parametrize("p", [4, 11, 12, 16])
def test_registers_match_a_bit_by_bit_reference(p):
    """Index = top p bits, rank = leading zeros of the other bits + 1 (rank 64 - p + 1 when all are zero)."""
    hashes = [mmh3.hash64(f"v{i}", signed=False)[0] for i in range(2_000)]
    hashes += [0, 1, 2**64 - 1, 2**(64 - p) - 1, 2**(64 - p), 2**52 - 1, 2**53 - 1, 2**53 + 1]
    index, rank = registers_of(np.array(hashes, dtype=np.uint64), p)
    for h, i, r in zip(hashes, index.tolist(), rank.tolist(), strict=True):
        rest = h & ((1 << (64 - p)) - 1)
        assert (i, r) == (h >> (64 - p), 64 - p - rest.bit_length() + 1)


def test_hash_values_is_the_unsigned_first_half_of_mmh3_hash64():
    assert hash_values(["abc"]).tolist() == [mmh3.hash64("abc", signed=False)[0]]


def test_adding_only_values_seen_before_reports_no_change():
    sketch = HyperLogLog(12)
    assert sketch.add(["a", "b"]) is True
    before = sketch.registers.copy()
    assert sketch.add(["b", "a", "a"]) is False and np.array_equal(sketch.registers, before)
    assert sketch.add(["a", "c"]) is True
