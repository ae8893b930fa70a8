"""Shadow-mode comparison: the speed layer's hour sketch against the exact counts of that hour."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from adapters import redis as redis_io
from adapters.redis import redis_errors
from trendcore.cms import CountMinSketch, error_bound
from trendcore.keys import KeySpace
from trendcore.settings import Settings


class AccuracyRow(NamedTuple):
    """One region's comparison of an hour: a row of `speed_accuracy` (SCHEMA, same order) and of the drift metric.

    Without a sketch in Redis (`sketch_present` false) only hour, region, exact_total and eps are known.
    """

    hour: int
    region: str
    exact_total: int
    speed_total: int | None
    eps: float
    error_bound: int | None
    tags_checked: int
    max_error: int | None
    mean_error: float | None
    within_bound: float | None
    undercounts: int | None
    top10_recall: float | None
    top10_source: str | None
    sketch_present: bool


COLUMNS = AccuracyRow._fields
SCHEMA = (
    "hour long, region string, exact_total long, speed_total long, eps double, error_bound long, "
    "tags_checked int, max_error long, mean_error double, within_bound double, undercounts int, "
    "top10_recall double, top10_source string, sketch_present boolean"
)
"""The Spark schema of the rows (the `speed_accuracy` table): AccuracyRow's fields, in order."""


def _missing(hour: int, region: str, exact_total: int, eps: float) -> AccuracyRow:
    """The row of a region whose hour sketch Redis does not hold (nothing to compare)."""
    return AccuracyRow(hour, region, exact_total, None, eps, None, 0, None, None, None, None, None, None, False)


def _compared(hour: int, region: str, exact_total: int, eps: float, sketch: CountMinSketch, speed_total: int,
              tags: Mapping[str, int], candidates: list[bytes]) -> AccuracyRow:
    """Estimates of the exact top `tags` against eps * N, and the recall of the speed layer's top 10.

    The speed layer's top 10 is its candidate set when present, else the checked tags re-ranked by estimate.
    """
    bound = error_bound(eps, speed_total)
    errors = {tag: sketch.estimate(tag) - count for tag, count in tags.items()}
    top_exact = set(sorted(tags, key=lambda t: (-tags[t], t))[:10])
    if candidates:
        top_speed, source = {c.decode() for c in candidates}, "candidates"
    else:
        top_speed, source = set(sorted(tags, key=lambda t: (-(tags[t] + errors[t]), t))[:10]), "estimates"
    values = list(errors.values()) or [0]
    return AccuracyRow(
        hour=hour, region=region, exact_total=exact_total, speed_total=speed_total, eps=eps, error_bound=bound,
        tags_checked=len(tags), max_error=max(values), mean_error=sum(values) / len(values),
        within_bound=sum(1 for e in values if e <= bound) / len(values), undercounts=sum(1 for e in values if e < 0),
        top10_recall=len(top_exact & top_speed) / max(1, len(top_exact)), top10_source=source, sketch_present=True,
    )


def compare(
    settings: Settings, hour: int, exact: Mapping[str, Mapping[str, int]], totals: Mapping[str, int]
) -> list[AccuracyRow]:
    """One row per region: estimates of the exact top tags (error vs eps * N) and top-10 recall.

    `exact` holds each region's top `accuracy_tags` tags; `totals` the exact mention totals.
    """
    shape, eps, keys = settings.sketch.shape, settings.sketch.eps, KeySpace.of(settings)
    rows = []
    with redis_errors(f"reading sketches of hour {hour}"):
        client = redis_io.client(settings.redis)
        for region in sorted(exact):
            raw = client.get(keys.cms(region, "h", hour))
            if raw is None:
                rows.append(_missing(hour, region, totals[region], eps))
                continue
            sketch = CountMinSketch.from_bytes(shape, raw)
            speed_total = int(client.get(keys.total(region, "h", hour)) or sketch.total())
            candidates = client.zrevrange(keys.candidates(region, "h", hour), 0, 9)
            rows.append(_compared(hour, region, totals[region], eps, sketch, speed_total, exact[region], candidates))
    return rows
