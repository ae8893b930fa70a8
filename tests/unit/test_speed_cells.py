"""A step's sketch cells (speed/cells.py): tags listed once, each sketch's cells summed as the reference sketch does."""

from __future__ import annotations

from collections import Counter

from speed.cells import CellCache, step_cells
from trendcore.cms import CountMinSketch, SketchShape, cell_indexes

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
