"""The step payload's sketch part: tags sent once, each sketch's cells summed as the reference sketch does."""

from __future__ import annotations

from collections import Counter

import orjson

from speed.aggregate import Increments
from speed.cells import CellCache, step_cells
from speed.writer import Target, _newest, build_payload
from trendcore.cms import CountMinSketch, SketchShape, cell_indexes
from trendcore.keys import PLAIN
from trendcore.settings.speed import SpeedSettings

SHAPE = SketchShape(width=7, depth=3)  # narrow: tags share cells, so sums per cell matter


def _sketches() -> dict[tuple[str, str, int], Counter]:
    return {("US", "m", 1): Counter({"a": 3, "b": 1, "c": 2, "d": 4}),
            ("all", "m", 1): Counter({"a": 3, "e": 5}),
            ("all", "h", 0): Counter({"e": 1})}


def test_each_sketch_gets_exactly_the_reference_sketchs_nonzero_cells():
    sketches = _sketches()
    tags, tag_cells, rows = step_cells(sketches, CellCache(SHAPE))
    assert sorted(tags) == ["a", "b", "c", "d", "e"]  # each tag once, whatever the sketches it is in
    for counter, (idx, ids, amounts) in zip(sketches.values(), rows, strict=True):
        reference = CountMinSketch(SHAPE)
        for tag, count in counter.items():
            reference.add(tag, count)
        expected = {cell: value for cell, value in enumerate(reference.counters) if value}
        assert dict(zip(ids.tolist(), amounts.tolist(), strict=True)) == expected
        assert [tags[i] for i in idx] == list(counter)
        for i in idx:
            assert tag_cells[i * SHAPE.depth:(i + 1) * SHAPE.depth].tolist() == cell_indexes(tags[i], SHAPE)


def test_payload_rows_index_the_step_tags_and_carry_plain_json_numbers():
    inc = Increments(sketches=_sketches())
    payload = orjson.loads(build_payload(inc, Target("o", "e", "x"), 10, 15, SpeedSettings(), CellCache(SHAPE), PLAIN))
    assert len(payload["tc"]) == SHAPE.depth * len(payload["tg"])
    us_minute = payload["sk"][0]
    assert us_minute[4] == 10  # the sketch total: the sum of its tags' counts
    assert [payload["tg"][i] for i in us_minute[5]] == ["a", "b", "c", "d"]
    assert all(isinstance(v, int) for v in us_minute[6] + us_minute[7])


def test_a_step_without_sketches_still_builds():
    inc = Increments(engagement={"p1": 2.0})
    payload = orjson.loads(build_payload(inc, Target("o", "e", "x"), 0, 1, SpeedSettings(), CellCache(SHAPE), PLAIN))
    assert payload["tg"] == [] and payload["tc"] == [] and payload["sk"] == []


def test_newest_posts_keep_what_the_scripts_trim_would_keep():
    """The set keeps the highest (score, member): by created ms, then by post id on equal ms."""
    flat = ["5", "p1", "9", "p2", "7", "p3", "9", "p0", "1", "p4"]
    assert _newest(flat, 3) == ["9", "p2", "9", "p0", "7", "p3"]
    assert _newest(flat, 5) is flat  # short lists go as they are


def test_payload_sends_at_most_posts_per_tag_newest_posts_a_tag_and_hour():
    inc = Increments()
    inc.new_posts[("a", 7)] = [x for i in range(50) for x in (str(1000 + i % 10), f"p{i:02d}")]
    speed = SpeedSettings(posts_per_tag=4)
    payload = orjson.loads(build_payload(inc, Target("o", "e", "x"), 0, 1, speed, CellCache(SHAPE), PLAIN))
    (_, _, flat), = payload["np"]
    assert flat == ["1009", "p49", "1009", "p39", "1009", "p29", "1009", "p19"]
