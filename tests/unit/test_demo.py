"""The demo's pure parts: its batch timings and the closed hour it compares with the generator."""

from __future__ import annotations

from trendcore.settings import Settings
from trendcore.windows import HOUR_MS
from trends.demo import DEMO_GRACE_MINUTES, Sent, demo_settings
from trends.gen.model import GenConfig, Stream


def test_the_closed_hour_top_tag_counts_history_and_late_live_posts():
    hour = 1_790_000_000_000 // HOUR_MS * HOUR_MS
    history = Stream(GenConfig(seed=1, start_ms=hour, event_rate=2.0, wall_now_ms=hour + HOUR_MS, late_share=0.0,
                                spike_at_s=10**9))
    list(history.records(7200))  # exactly the hour
    live = Stream(GenConfig(seed=2, start_ms=hour + HOUR_MS, event_rate=2.0, late_share=1.0, late_min_s=300,
                            late_max_s=1800))
    list(live.records(500))  # every live post is late: all land in the hour before the live start
    tag, sent = Sent(history.truth, live.truth).top(hour)
    expected = history.truth.counts("all") + live.truth.counts("all")
    assert (tag, sent) == expected.most_common(1)[0]
    assert sent > history.truth.counts("all")[tag]
    assert Sent(history.truth, live.truth).top(hour - HOUR_MS) == (None, None)


def test_demo_timings_shorten_grace_unless_set(monkeypatch):
    monkeypatch.delenv("TRENDS_BATCH__GRACE_MINUTES", raising=False)
    assert demo_settings(Settings()).batch.grace_minutes == DEMO_GRACE_MINUTES
    monkeypatch.setenv("TRENDS_BATCH__GRACE_MINUTES", "7")
    assert demo_settings(Settings()).batch.grace_minutes == 7
