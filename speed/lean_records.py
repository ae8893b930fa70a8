"""Lean records: a speed worker's consumer hands out (offset, key, value) decoded straight from the batches.

kafka-python (3.0.12) decodes every record of a fetched batch into a DefaultRecord (a pure-Python varint per
field, its headers), then wraps it in a 13-field ConsumerRecord with sizes, headers and deserializers: 7.5 µs
of CPU a record on a bare consume loop, a third of a worker's time. The worker reads three fields. Here a
batch's records are read from its buffer in one tight loop into `Lean` tuples (3.3 µs a record on the same
loop, docs/benchmarks.md); the fetch, the group, positions, CRC checks and control batches stay kafka-python's.

Installed on one consumer (`install`), not process-wide; `speed.lean_records=false` turns it off. It reads
kafka-python's batch internals (`_buffer`, `_pos`, `_num_records`), so it is checked against kafka-python's own
decoding on batches kafka-python builds (tests/unit/test_lean_records.py), and `install` keeps the stock
reader when those are missing. Consumers with deserializers or read_committed keep the stock reader too.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

import kafka.errors as kafka_errors
from kafka.consumer.fetcher import Fetcher
from kafka.protocol.consumer import IsolationLevel
from kafka.record.default_records import DefaultRecordBatch

log = logging.getLogger("speed.lean_records")
_BATCH_PARTS = ("_buffer", "_pos", "_num_records", "_maybe_uncompress")


class Lean(NamedTuple):
    """What a worker reads of a record (kafka-python's ConsumerRecord has the same field names)."""

    offset: int
    key: bytes | None
    value: bytes | None
    leader_epoch: int = -1


def _varint(buf: bytearray | bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint at `pos` and the position after it (one byte: most fields of a small record)."""
    byte = buf[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    value, shift = byte & 0x7F, 7
    while True:
        pos += 1
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1), pos + 1
        shift += 7


def _bytes(buf: bytearray | bytes, pos: int, size: int, end: int) -> tuple[bytes | None, int]:
    if size < 0:
        return None, pos
    if pos + size > end:
        raise kafka_errors.CorruptRecordError(f"a field of {size} bytes runs past its record")
    return bytes(buf[pos:pos + size]), pos + size


def batch_records(batch: DefaultRecordBatch, leader_epoch: int) -> list[Lean]:
    """The records of a v2 batch (decompressed first), headers skipped; CorruptRecordError when its records
    do not fill it exactly, as kafka-python says."""
    batch._maybe_uncompress()
    buf, pos, base = batch._buffer, batch._pos, batch.base_offset
    taken = []
    try:
        for _ in range(batch._num_records):
            length, pos = _varint(buf, pos)
            end = pos + length
            _, pos = _varint(buf, pos + 1)  # attributes (int8), then the timestamp delta
            delta, pos = _varint(buf, pos)
            size, pos = _varint(buf, pos)
            key, pos = _bytes(buf, pos, size, end)
            size, pos = _varint(buf, pos)
            value, pos = _bytes(buf, pos, size, end)
            taken.append(Lean(base + delta, key, value, leader_epoch))
            pos = end  # the headers
    except IndexError as exc:
        raise kafka_errors.CorruptRecordError(f"Found invalid record structure: {exc!r}") from None
    if pos != len(buf):
        raise kafka_errors.CorruptRecordError(f"{len(buf) - pos} unconsumed bytes after all records consumed")
    batch._pos = pos
    return taken


class LeanPartitionRecords(Fetcher.PartitionRecords):
    """kafka-python's PartitionRecords whose records are `Lean` tuples."""

    def _unpack_records(self, tp, records, key_deserializer, value_deserializer):
        if key_deserializer is not None or value_deserializer is not None or \
                self.isolation_level != IsolationLevel.READ_UNCOMMITTED:
            yield from super()._unpack_records(tp, records, key_deserializer, value_deserializer)
            return
        batch, last = records.next_batch(), None
        while batch is not None:
            last = batch
            if self.check_crcs and not batch.validate_crc():
                raise kafka_errors.CorruptRecordError(
                    f"Record batch for partition {self.topic_partition} at offset {batch.base_offset} failed crc check")
            if batch.magic == 2:
                self.leader_epoch = batch.leader_epoch
                taken = [] if batch.is_control_batch else batch_records(batch, self.leader_epoch)
                if batch.is_control_batch:
                    self.next_fetch_offset = batch.next_offset
            else:
                taken = self._legacy(batch)
            for record in taken:
                self.records_read += 1
                self.next_fetch_offset = record.offset + 1
                yield record
            batch = records.next_batch()
        if last is not None and last.magic == 2:  # the offset after the batch, even when compaction removed its tail
            self.next_fetch_offset = last.next_offset
        self.drain()

    def _legacy(self, batch: Any) -> list[Lean]:
        """A message-format v0/v1 batch (not on Kafka 4 brokers), through kafka-python's own decoding."""
        taken = []
        for record in batch:
            if self.check_crcs and not record.validate_crc():
                raise kafka_errors.CorruptRecordError(
                    f"Record for partition {self.topic_partition} at offset {record.offset} failed crc check")
            taken.append(Lean(record.offset, record.key, record.value, self.leader_epoch))
        return taken


def install(consumer: Any) -> bool:
    """Make `consumer` (a kafka.KafkaConsumer) hand out Lean records; False (and a warning) when this
    kafka-python's fetcher or batches are not the ones this reader knows."""
    fetcher = getattr(consumer, "_fetcher", None)
    known = fetcher is not None and getattr(fetcher, "PartitionRecords", None) is Fetcher.PartitionRecords and all(
        hasattr(DefaultRecordBatch, part) for part in _BATCH_PARTS)
    if not known:
        log.warning("kafka-python's fetcher is not the one speed.lean_records knows: records are decoded the "
                    "stock way")
        return False
    fetcher.PartitionRecords = LeanPartitionRecords
    return True
