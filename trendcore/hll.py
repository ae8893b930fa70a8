"""HyperLogLog (Flajolet et al. 2007) in numpy: distinct counts in 2**p one-byte registers.

Values are hashed with the 64-bit MurmurHash3 (the first half of mmh3.hash64): the top p bits pick a
register, the rank of the first 1 bit in the rest is its candidate value. Standard error 1.04 / sqrt(2**p);
small counts use linear counting (no large-range correction is needed with 64-bit hashes).
Bytes: `D` + p + the registers, or, when fewer than a third of them are set, `S` + p + the set registers'
indexes (u16, little-endian, ascending) + their ranks (u8). Packed (for a sketch that stopped changing and is
kept for hours): `d` + p + zlib of the registers, or `s` + p + zlib of the gaps between the set indexes (low
bytes, then high bytes) and their ranks: about half the bytes, as zlib finds the gaps' high bytes mostly zero
and the ranks mostly small. The speed layer keeps these per tag and hour in its partition state (issue #24).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable

import mmh3
import numpy as np

MIN_P, MAX_P = 4, 16
DENSE, SPARSE = b"D", b"S"
PACKED_DENSE, PACKED_SPARSE = b"d", b"s"
PACK_LEVEL = 1
"""zlib's fastest level: the packed form is written once a sketch stops changing."""


def hash_values(values: Iterable[str]) -> np.ndarray:
    """The u64 hash of each value: hash once, add to several sketches (`HyperLogLog.add_hashes`)."""
    return np.fromiter((mmh3.hash64(v, signed=False)[0] for v in values), dtype=np.uint64)


def _bit_length(x: np.ndarray) -> np.ndarray:
    """Bits needed for each u64 (0 for 0): via float64 on 32-bit halves, exact at every size."""
    high, low = (x >> np.uint64(32)).astype(np.float64), (x & np.uint64(0xFFFFFFFF)).astype(np.float64)
    with np.errstate(divide="ignore"):
        bits_high = np.floor(np.log2(high)) + 33
        bits_low = np.floor(np.log2(low)) + 1
    return np.where(high > 0, bits_high, np.where(low > 0, bits_low, 0)).astype(np.uint8)


def registers_of(hashes: np.ndarray, p: int) -> tuple[np.ndarray, np.ndarray]:
    """Register index (top p bits) and rank (leading zeros of the other 64 - p bits, plus one) per hash."""
    rest_bits = 64 - p
    index = (hashes >> np.uint64(rest_bits)).astype(np.intp)
    rest = hashes & np.uint64((1 << rest_bits) - 1)
    rank = (rest_bits + 1 - _bit_length(rest)).astype(np.uint8)
    return index, rank


def _alpha(m: int) -> float:
    """The bias constant alpha_m of the raw estimate."""
    return {16: 0.673, 32: 0.697, 64: 0.709}.get(m, 0.7213 / (1 + 1.079 / m))


class HyperLogLog:
    """A distinct counter of precision p: add, merge (register max), estimate, bytes."""

    __slots__ = ("p", "registers")

    def __init__(self, p: int = 12, registers: np.ndarray | None = None) -> None:
        if not MIN_P <= p <= MAX_P:
            raise ValueError(f"precision {p} is outside {MIN_P}..{MAX_P}")
        self.p = p
        self.registers = registers if registers is not None else np.zeros(1 << p, dtype=np.uint8)
        if self.registers.shape != (1 << p,) or self.registers.dtype != np.uint8:
            raise ValueError(f"expected {1 << p} u8 registers for precision {p}")

    @property
    def m(self) -> int:
        return 1 << self.p

    def add(self, values: Iterable[str]) -> bool:
        """Add many values at once; True when the sketch changed."""
        return self.add_hashes(hash_values(values))

    def add_hashes(self, hashes: np.ndarray) -> bool:
        """Add values already hashed with `hash_values`; True when the sketch changed."""
        return self.add_registers(*registers_of(hashes, self.p))

    def add_registers(self, index: np.ndarray, rank: np.ndarray) -> bool:
        """Raise registers to the ranks given (from `registers_of` with this precision); True when one rose
        (an author seen before changes nothing: nothing to write again)."""
        if not (rank > self.registers[index]).any():
            return False
        np.maximum.at(self.registers, index, rank)
        return True

    def merge(self, other: HyperLogLog) -> None:
        """Union with another sketch of the same precision: the register-wise maximum."""
        if other.p != self.p:
            raise ValueError(f"cannot merge precision {other.p} into {self.p}")
        np.maximum(self.registers, other.registers, out=self.registers)

    def estimate(self) -> float:
        """The distinct count: raw HLL estimate, or linear counting while it is small and registers are 0."""
        m = self.m
        raw = _alpha(m) * m * m / float(np.ldexp(1.0, -self.registers.astype(np.int32)).sum())
        zeros = int(np.count_nonzero(self.registers == 0))
        if raw <= 2.5 * m and zeros:
            return m * math.log(m / zeros)
        return raw

    def to_bytes(self, packed: bool = False) -> bytes:
        """`S` + p + indexes + ranks of the set registers when fewer than a third are set, else `D` + p +
        registers. `packed`: the packed form (`s`, `d`) when it is shorter (not for a sketch of a few authors)."""
        header = bytes((self.p,))
        nonzero = np.flatnonzero(self.registers)
        if 3 * len(nonzero) < self.m:
            ranks = self.registers[nonzero].tobytes()
            plain = SPARSE + header + nonzero.astype("<u2").tobytes() + ranks
            if packed:
                gaps = np.diff(nonzero, prepend=0).astype("<u2").view(np.uint8).reshape(-1, 2)
                body = gaps[:, 0].tobytes() + gaps[:, 1].tobytes() + ranks
                return min(plain, PACKED_SPARSE + header + zlib.compress(body, PACK_LEVEL), key=len)
            return plain
        plain = DENSE + header + self.registers.tobytes()
        if packed:
            return min(plain, PACKED_DENSE + header + zlib.compress(self.registers.tobytes(), PACK_LEVEL), key=len)
        return plain

    @classmethod
    def from_bytes(cls, blob: bytes) -> HyperLogLog:
        """The sketch `to_bytes` wrote, packed or not; ValueError on an unknown format or a size that does not
        fit."""
        kind, p, body = blob[:1], blob[1] if len(blob) > 1 else 0, memoryview(blob)[2:]
        if not MIN_P <= p <= MAX_P:
            raise ValueError(f"HyperLogLog blob of precision {p}, outside {MIN_P}..{MAX_P}")
        if kind in (PACKED_DENSE, PACKED_SPARSE):
            return cls._unpacked(kind, p, body)
        if kind == DENSE:
            if len(body) != 1 << p:
                raise ValueError(f"dense HyperLogLog blob of {len(body)} registers, expected {1 << p}")
            return cls(p, np.frombuffer(body, dtype=np.uint8).copy())
        if kind != SPARSE or len(body) % 3:
            raise ValueError(f"not a HyperLogLog blob (format {bytes(kind)!r}, {len(body)} bytes)")
        count = len(body) // 3
        index = np.frombuffer(body, dtype="<u2", count=count)
        if count and int(index.max()) >= 1 << p:
            raise ValueError(f"sparse HyperLogLog blob names register {int(index.max())} of {1 << p}")
        sketch = cls(p)
        sketch.registers[index] = np.frombuffer(body, dtype=np.uint8, offset=2 * count)
        return sketch

    @classmethod
    def _unpacked(cls, kind: bytes, p: int, body: memoryview) -> HyperLogLog:
        """A packed sketch (`d`, `s`): zlib's body back into registers."""
        try:
            raw = zlib.decompress(body)
        except zlib.error as exc:
            raise ValueError(f"packed HyperLogLog blob does not inflate: {exc}") from None
        if kind == PACKED_DENSE:
            return cls.from_bytes(DENSE + bytes((p,)) + raw)
        if len(raw) % 3:
            raise ValueError(f"packed sparse HyperLogLog blob of {len(raw)} bytes, not 3 a register")
        count = len(raw) // 3
        gaps = np.frombuffer(raw, dtype=np.uint8, count=count).astype(np.int64)
        gaps |= np.frombuffer(raw, dtype=np.uint8, count=count, offset=count).astype(np.int64) << 8
        index = np.cumsum(gaps)
        if count and (int(index[-1]) >= 1 << p or (count > 1 and not (gaps[1:] > 0).all())):
            raise ValueError("packed sparse HyperLogLog blob names registers out of order or range")
        sketch = cls(p)
        sketch.registers[index.astype(np.intp)] = np.frombuffer(raw, dtype=np.uint8, offset=2 * count)
        return sketch


def is_packed(blob: bytes) -> bool:
    """Whether stored sketch bytes are the packed form (`to_bytes(packed=True)` when it was shorter)."""
    return blob[:1] in (PACKED_DENSE, PACKED_SPARSE)
