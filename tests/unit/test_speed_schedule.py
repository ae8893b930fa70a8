"""The speed layer's clock: workers checkpoint just after each multiple of flush_every_s on the wall clock, and the
materializer's rounds start at multiples of materialize_every_s plus a lag, so a round takes the checkpoints just
written (not up to a whole period later)."""

from __future__ import annotations

import pytest

from speed.checkpoint import Owned
from speed.materialize import next_round_at


def owned(flushed_ms: int) -> Owned:
    return Owned("eng", 3, stored=5, fresh=False, state=None, seen=None, flushed_ms=flushed_ms)


@pytest.mark.parametrize(("flushed_ms", "now_ms", "due"), [
    (10_020, 10_999, False),  # flushed after the boundary of 10 s: the next is 11 s
    (10_020, 11_000, True),
    (10_990, 11_005, True),  # 15 ms later, but a boundary passed: every partition flushes just after it
    (0, 10_000, True),  # never flushed
    (11_500, 11_900, False),
])
def test_a_partition_is_due_once_a_boundary_passed_since_its_checkpoint(flushed_ms, now_ms, due):
    assert owned(flushed_ms).flush_due(now_ms, 1000) is due


def test_rounds_follow_ticks_of_the_period_plus_the_lag():
    assert next_round_at(1000.4, 2.0, 0.4) == pytest.approx(1002.4)
    assert next_round_at(1000.43, 2.0, 0.4) == pytest.approx(1002.4)  # the sleep overshot: still this tick's round
    assert next_round_at(1000.39, 2.0, 0.4) == pytest.approx(1002.4)  # woke a little early


def test_a_late_round_belongs_to_the_next_tick_and_the_schedule_comes_back():
    assert next_round_at(1001.3, 2.0, 0.4) == pytest.approx(1002.4)  # a first round at any phase: 1.1 s later
    assert next_round_at(1002.9, 2.0, 0.4) == pytest.approx(1004.4)  # an overrun's round, started at once
    assert next_round_at(1001.95, 2.0, 0.4) == pytest.approx(1004.4)  # the last quarter before a tick: that tick's
    for started in (1000.41, 1001.0, 1001.85, 1001.95, 1002.5):
        gap = next_round_at(started, 2.0, 0.4) - started
        assert 0.5 <= gap <= 2.5  # never a burst of rounds, never more than a period and a quarter between
