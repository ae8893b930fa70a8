"""Reference sketches built in-process from exact counts (ground truth), for tests and benchmarks.

Same hashing and cells as the Redis sketches, so a correct, exactly-once speed layer matches them
cell for cell.
"""

from __future__ import annotations

from collections.abc import Mapping

from trendcore.cms import CountMinSketch, SketchShape
from trendcore.regions import WORLDWIDE
from trendcore.windows import MINUTE_MS, bucket_of


def reference_sketches(
    mentions: Mapping[tuple[str, str, int], int], shape: SketchShape
) -> dict[tuple[str, str, int], CountMinSketch]:
    """(region, unit, bucket) -> sketch, from (tag, region, minute) -> count, for regions and 'all'."""
    grouped: dict[tuple[str, str, int], dict[str, int]] = {}
    for (tag, region, minute), count in mentions.items():
        hour = bucket_of(minute * MINUTE_MS, "h")
        for coords in ((region, "m", minute), (WORLDWIDE, "m", minute), (region, "h", hour), (WORLDWIDE, "h", hour)):
            bucket = grouped.setdefault(coords, {})
            bucket[tag] = bucket.get(tag, 0) + count
    sketches = {}
    for coords, counts in grouped.items():
        sketch = CountMinSketch(shape)
        for tag, count in counts.items():
            sketch.add(tag, count)
        sketches[coords] = sketch
    return sketches
