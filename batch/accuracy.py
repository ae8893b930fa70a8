"""Shadow-mode comparison: the speed layer's hour sketch against the exact counts of that hour."""

from __future__ import annotations

from collections.abc import Mapping

from trendcore import keys
from trendcore.cms import CountMinSketch, error_bound
from trendcore.settings import Settings
from adapters import redis as redis_io
from adapters.redis import redis_errors

COLUMNS = (
    "hour", "region", "exact_total", "speed_total", "eps", "error_bound", "tags_checked", "max_error",
    "mean_error", "within_bound", "undercounts", "top10_recall", "top10_source", "sketch_present",
)
SCHEMA = (
    "hour long, region string, exact_total long, speed_total long, eps double, error_bound long, "
    "tags_checked int, max_error long, mean_error double, within_bound double, undercounts int, "
    "top10_recall double, top10_source string, sketch_present boolean"
)


def compare(
    settings: Settings, hour: int, exact: Mapping[str, Mapping[str, int]], totals: Mapping[str, int]
) -> list[tuple]:
    """One row per region: estimates of the exact top tags (error vs eps * N) and top-10 recall.

    `exact` holds each region's top `accuracy_tags` tags; `totals` the exact mention totals. The
    speed layer's top 10 is its candidate set when present, else the checked tags re-ranked by estimate.
    """
    shape, eps = settings.sketch.shape, settings.sketch.eps
    rows = []
    with redis_errors(f"reading sketches of hour {hour}"):
        client = redis_io.client(settings.redis)
        for region in sorted(exact):
            raw = client.get(keys.cms(region, "h", hour))
            if raw is None:
                rows.append((hour, region, totals[region], None, eps, None, 0, None, None, None, None, None, None, False))
                continue
            sketch = CountMinSketch.from_bytes(shape, raw)
            speed_total = int(client.get(keys.total(region, "h", hour)) or sketch.total())
            bound = error_bound(eps, speed_total)
            tags = exact[region]
            errors = {tag: sketch.estimate(tag) - count for tag, count in tags.items()}
            top_exact = set(sorted(tags, key=lambda t: (-tags[t], t))[:10])
            candidates = client.zrevrange(keys.candidates(region, "h", hour), 0, 9)
            if candidates:
                top_speed, source = {c.decode() for c in candidates}, "candidates"
            else:
                top_speed = set(sorted(tags, key=lambda t: (-(tags[t] + errors[t]), t))[:10])
                source = "estimates"
            values = list(errors.values()) or [0]
            rows.append((
                hour, region, totals[region], speed_total, eps, bound, len(tags), max(values),
                sum(values) / len(values), sum(1 for e in values if e <= bound) / len(values),
                sum(1 for e in values if e < 0), len(top_exact & top_speed) / max(1, len(top_exact)), source, True,
            ))
    return rows
