"""Rebuilding (speed/replay.py): when a positioned partition replays, its marker, and the progress summary."""

from __future__ import annotations

import pytest

from speed.replay import Replay, marker, parse_marker, progress, replay_of, summary
from trendcore.snapshot import ReplayedPartition


def _part(partition: int, start: int, target: int, reached: int, topic: str = "posts") -> ReplayedPartition:
    return ReplayedPartition(topic=topic, partition=partition, from_offset=start, target_offset=target,
                             reached_offset=reached)


def test_no_checkpoint_with_records_to_replay_is_rebuilding():
    assert replay_of(fresh=True, start=100, log_end=101, lag_records=50_000) == Replay(100, 101)
    assert replay_of(fresh=True, start=100, log_end=100, lag_records=50_000) is None  # nothing to replay


def test_a_checkpoint_is_rebuilding_only_over_the_lag_setting():
    assert replay_of(fresh=False, start=0, log_end=50_000, lag_records=50_000) is None
    assert replay_of(fresh=False, start=0, log_end=50_001, lag_records=50_000) == Replay(0, 50_001)
    assert replay_of(fresh=False, start=10, log_end=5, lag_records=0) is None  # past the end: not a replay


def test_a_marker_round_trips_and_bad_data_reads_as_none():
    blob = marker("eng", 4, Replay(10, 110), 60)
    assert parse_marker(blob) == _part(4, 10, 110, 60, topic="eng")
    assert parse_marker(None) is None and parse_marker(b"") is None and parse_marker(b"{oops") is None
    assert parse_marker(b'{"topic": "posts"}') is None


def test_progress_is_the_share_of_records_replayed_over_every_rebuilding_partition():
    assert progress([_part(0, 0, 100, 50), _part(1, 1000, 1300, 1000)]) == pytest.approx(50 / 400)
    assert progress([_part(0, 0, 100, 100)]) == 1.0
    assert progress([_part(0, 0, 100, 250), _part(1, 0, 100, -5)]) == 0.5  # clamped per partition
    assert progress([]) == 0.0 and progress([_part(0, 5, 5, 5)]) == 0.0


def test_the_summary_lists_the_replaying_partitions_and_is_none_without_them():
    found = summary([None, _part(2, 0, 100, 25, "posts"), _part(0, 0, 300, 75, "eng"), _part(1, 0, 10, 10)])
    assert [(p.topic, p.partition) for p in found.partitions] == [("eng", 0), ("posts", 2)]
    assert found.progress == 0.25 and 0.0 <= found.progress < 1.0
    assert summary([None, None]) is None
    assert summary([_part(1, 0, 10, 10)]) is None  # caught up, its deletion not seen yet
