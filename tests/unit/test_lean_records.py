"""Lean records (speed/lean_records.py) against kafka-python's own decoding of the batches it builds."""

from __future__ import annotations

import pytest
from kafka import TopicPartition
from kafka.consumer.fetcher import Fetcher
from kafka.record import MemoryRecords
from kafka.record.memory_records import MemoryRecordsBuilder

from speed.lean_records import LeanPartitionRecords

TP = TopicPartition("posts", 3)
NONE, GZIP = 0, 1


def _batch(magic: int, compression: int, rows: list[tuple], offset: int) -> bytes:
    builder = MemoryRecordsBuilder(magic=magic, compression_type=compression, batch_size=1 << 22, offset=offset)
    for i, (key, value, headers) in enumerate(rows):
        builder.append(timestamp=1_795_982_400_000 + i, key=key, value=value, headers=headers)
    builder.close()
    return bytes(builder.buffer())


def _rows(count: int, size: int, headers: bool = True) -> list[tuple]:
    """Keys, values of `size` bytes (a few empty or missing: a tombstone, a record without a key), headers
    (message format v2 only)."""
    rows = []
    for i in range(count):
        key = None if i % 7 == 3 else f"post-{i}".encode()
        value = None if i % 11 == 5 else b"" if i % 13 == 6 else bytes([65 + i % 26]) * size
        rows.append((key, value, [("h", b"x" * (i % 3))] if headers and i % 2 else []))
    return rows


def _taken(cls, raw: bytes, fetch_offset: int) -> tuple[list[tuple], int, int]:
    part = cls(fetch_offset, TP, MemoryRecords(raw), check_crcs=True)
    got = part.take()
    return [(r.offset, r.key, r.value) for r in got], part.next_fetch_offset, part.records_read


@pytest.mark.parametrize(("magic", "compression"), [(2, NONE), (2, GZIP), (1, NONE), (1, GZIP)])
@pytest.mark.parametrize("size", [10, 300, 70_000])  # one-, two- and three-byte length varints
@pytest.mark.parametrize("fetch_offset", [100, 157])  # a fetch from inside the first batch skips its head
def test_lean_records_are_kafka_pythons_records(magic, compression, size, fetch_offset):
    rows = _rows(40, size, headers=magic == 2)
    raw = b"".join(_batch(magic, compression, rows, offset) for offset in (100, 140, 180))
    lean, stock = _taken(LeanPartitionRecords, raw, fetch_offset), _taken(Fetcher.PartitionRecords, raw, fetch_offset)
    assert lean == stock
    assert lean[0][0][0] == fetch_offset and lean[1] == 220  # every record from the fetch offset on


def test_a_take_of_part_of_a_fetch_leaves_the_next_offset_after_the_last_record_taken():
    raw = _batch(2, NONE, _rows(50, 20), 0)
    lean = LeanPartitionRecords(0, TP, MemoryRecords(raw), check_crcs=True)
    first = lean.take(20)
    assert [r.offset for r in first] == list(range(20)) and lean.next_fetch_offset == 20
    assert [r.offset for r in lean.take()] == list(range(20, 50)) and lean.next_fetch_offset == 50


def test_a_corrupted_batch_fails_its_crc_check_as_kafka_python_says():
    raw = bytearray(_batch(2, NONE, _rows(5, 20), 0))
    raw[-3] ^= 0xFF
    with pytest.raises(Exception, match="crc") as lean:
        LeanPartitionRecords(0, TP, MemoryRecords(bytes(raw)), check_crcs=True).take()
    with pytest.raises(Exception, match="crc") as stock:
        Fetcher.PartitionRecords(0, TP, MemoryRecords(bytes(raw)), check_crcs=True).take()
    assert type(lean.value) is type(stock.value)
