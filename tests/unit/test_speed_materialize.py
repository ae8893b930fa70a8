"""The materializer's pure parts: a window's source label."""

from __future__ import annotations

from speed.materialize import Window


def _window(exact: dict[int, bool]) -> Window:
    buckets = [10, 11, 12]
    return Window("US", "24h", "h", buckets, [None] * 3, exact, 0, 0, [0] * 3)


def test_a_window_is_exact_mixed_or_approx_by_its_published_hours():
    assert _window({10: True, 11: True, 12: True}).source == "exact"
    assert _window({10: True, 11: False}).source == "mixed"  # 12 has no flag: approximate
    assert _window({}).source == "approx"
    assert _window({10: False, 11: False, 12: False}).source == "approx"
