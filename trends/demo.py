"""`make demo`: the whole stack, an hour of history, then a live stream with a viral spike and a
terminal summary every half minute (top tags now; approximate against exact for the last closed hour)."""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from trendcore.events import format_time
from trendcore.settings import Settings
from trendcore.windows import HOUR_MS, MINUTE_MS, minute_of
from trends.gen.model import GenConfig, Stream
from trends.gen.run import GenResult, produce
from trends.gen.truth import GroundTruth

HISTORY_MINUTES = 65
DEMO_GRACE_MINUTES = 1
DEMO_ARCHIVE_EVERY_MINUTES = 2


def demo_settings(settings: Settings) -> Settings:
    """The demo's shorter batch timings (1 min grace, archive every 2 min): the closed hour turns exact within minutes.

    Only for an Airflow the demo starts itself; an explicit TRENDS_BATCH__GRACE_MINUTES or
    TRENDS_AIRFLOW__ARCHIVE_EVERY_MINUTES wins.
    """
    batch, air = settings.batch, settings.airflow
    if "TRENDS_BATCH__GRACE_MINUTES" not in os.environ:
        batch = batch.model_copy(update={"grace_minutes": DEMO_GRACE_MINUTES})
    if "TRENDS_AIRFLOW__ARCHIVE_EVERY_MINUTES" not in os.environ:
        air = air.model_copy(update={"archive_every_minutes": DEMO_ARCHIVE_EVERY_MINUTES})
    return settings.model_copy(update={"batch": batch, "airflow": air})


def _get(base: str, path: str) -> dict | None:
    """GET a JSON answer of the API; None while it is not reachable."""
    try:
        with urllib.request.urlopen(base + path, timeout=5) as answer:
            return json.loads(answer.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def summary(settings: Settings, now_ms: int, sent: Sent | None = None) -> list[str]:
    """A few lines: the top 5 by volume and by rise now, and the last closed hour's top tag: the API's
    count and source against what the generator sent."""
    base = f"http://{settings.api.host}:{settings.api.port}"
    lines = []
    for rank in ("volume", "rise"):
        snap = _get(base, f"/trending?window=1h&region=all&k=5&rank={rank}")
        if not snap or not snap.get("entries"):
            lines.append(f"top by {rank}: (no snapshot yet)")
            continue
        tags = ", ".join(f"#{e['display']} {e['count']}{_arrow(e.get('rank_change'))}" for e in snap["entries"])
        lines.append(f"top by {rank} (last hour, {snap.get('age_s', '?')} s old): {tags}")
    closed = (now_ms // HOUR_MS - 1) * HOUR_MS
    first = _closed_hour(base, closed, sent)
    if first:
        lines.append(first[0])
        if first[1] != "exact":  # just after the hour turned: the hour before may be exact already
            before = _closed_hour(base, closed - HOUR_MS, sent)
            if before and before[1] == "exact":
                lines.append(before[0])
    return lines


def _closed_hour(base: str, hour_ms: int, sent: Sent | None) -> tuple[str, str] | None:
    """One line on a closed hour's top tag (API count, bounds, source, what was sent) and its source."""
    tag, generated = sent.top(hour_ms) if sent else (None, None)
    if tag is None:
        top = _get(base, "/trending?window=24h&region=all&k=1")
        tag = top["entries"][0]["tag"] if top and top.get("entries") else None
    if tag is None:
        return None
    span = f"from={format_time(hour_ms)}&to={format_time(hour_ms + HOUR_MS)}"
    answer = _get(base, f"/tags/{urllib.request.quote(tag)}/count?region=all&{span}")
    if not answer:
        return None
    truth = f", the generator sent {generated}" if generated is not None else ""
    note = "" if answer["source"] == "exact" else " (exact once Airflow's hourly_exact has published it)"
    line = (f"closed hour {format_time(hour_ms)[11:16]} UTC, #{answer['display']}: {answer['count']} "
            f"[{answer['lower_bound']}..{answer['upper_bound']}] source={answer['source']}{truth}{note}")
    return line, answer["source"]


@dataclass(frozen=True)
class Sent:
    """What the demo sent (history and live), to set a closed hour's count beside the generator's own."""

    history: GroundTruth
    live: GroundTruth

    def top(self, hour_ms: int) -> tuple[str | None, int | None]:
        """The hour's top tag worldwide and how many posts the generator sent with it."""
        minutes = range(minute_of(hour_ms), minute_of(hour_ms + HOUR_MS))
        live = GroundTruth(mentions=self.live.mentions.copy())  # one C-level dict copy: atomic under the GIL
        counts = self.history.counts("all", minutes) + live.counts("all", minutes)
        return counts.most_common(1)[0] if counts else (None, None)


def _arrow(change: int | None) -> str:
    if change is None:
        return " (new)"
    return f" (+{change})" if change > 0 else (f" ({change})" if change < 0 else "")


def run(settings: Settings, rate: float, seed: int, log: Callable[[str], None]) -> GenResult:
    """Up, history, Airflow, then live posts until Ctrl-C, printing a summary every 30 s; the stream Ctrl-C
    stopped (history or live) as the result.

    Airflow starts after the history is in Kafka, so its first archive run already holds the closed hour.
    """
    from trends.stack import manager

    settings = demo_settings(settings)
    first = [name for name in manager.components(settings) if name != "airflow"]
    manager.up(settings, names=first, log=log)
    now = int(time.time() * 1000)
    start = now - HISTORY_MINUTES * MINUTE_MS
    history_rate = 10.0
    count = int(HISTORY_MINUTES * 60 * history_rate)
    log(f"sending the last {HISTORY_MINUTES} minutes of history ({count:,} posts) so the last closed hour has data")
    history = Stream(GenConfig(seed=seed, start_ms=start, event_rate=history_rate, wall_now_ms=now, spike_at_s=10**9))
    sent_history = produce(history, settings, count=count)
    if sent_history.stopped:
        return sent_history
    log(f"starting Airflow (demo timings: archive every {settings.airflow.archive_every_minutes} min, "
        f"grace {settings.batch.grace_minutes} min); hourly_exact publishes the last closed hour once archived")
    manager.up(settings, names=["airflow"], log=log)
    live_from = int(time.time() * 1000)
    live = Stream(GenConfig(seed=seed + 1, start_ms=live_from, event_rate=rate,
                            wall_now_ms=live_from, spike_at_s=60.0, spike_ramp_s=120.0))
    sent = Sent(history.truth, live.truth)
    log(f"streaming live posts at {rate:,.0f}/s; #ViralMoment starts rising in a minute. "
        "Ctrl-C stops the stream, `make down` the stack.")
    log(f"  dashboard: http://{settings.api.host}:{settings.api.port}/   Airflow: http://127.0.0.1:{settings.airflow.port}/")
    log(f"  notebooks: `make notebooks` (JupyterLab; lake = {settings.spark.lake}), or .venv/bin/papermill "
        f"notebooks/explore_trends.ipynb var/explore.ipynb -p lake {settings.spark.lake}")
    stop = threading.Event()

    def report() -> None:
        while not stop.wait(30):
            for line in summary(settings, int(time.time() * 1000), sent):
                log(line)

    threading.Thread(target=report, daemon=True, name="demo-summary").start()
    try:
        return produce(live, settings, rate=rate)
    finally:
        stop.set()
