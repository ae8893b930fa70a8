"""Sketch cells of a step's tags (pure): memoised cell indexes and each sketch's summed increments.

Used by the in-memory partition state (speed/state.py) and the merger.
"""

from __future__ import annotations

from collections import Counter
from itertools import chain

import numpy as np

from trendcore.cms import SketchShape, cell_indexes


class CellCache:
    """Cell indexes per tag, memoised (1.5 µs of hashing a miss); cleared when it holds `limit` tags.

    An entry costs about 350 bytes (the tag and its list of ints), so the limit bounds the cache near 35 MB. On
    the generator's stream (182,000 distinct tags in 2 million posts) 100,000 tags miss 10.9% of mentions
    against 3.7% for an unbounded cache: about 0.1 µs more a mention, for 140 MB less at 500,000 tags."""

    def __init__(self, shape: SketchShape, limit: int = 100_000) -> None:
        self.shape, self.limit, self.cells = shape, limit, {}

    def __call__(self, tag: str) -> list[int]:
        found = self.cells.get(tag)
        if found is None:
            if len(self.cells) >= self.limit:
                self.cells.clear()
            found = self.cells[tag] = cell_indexes(tag, self.shape)
        return found


def step_cells(sketches: dict[tuple[str, str, int], Counter],
               cells: CellCache) -> tuple[list[str], np.ndarray, list[tuple]]:
    """The step's distinct tags, their cells (`depth` per tag, sent once per step, to read estimates
    back), and per sketch: its tags as indexes into them, its distinct cells and the increment summed
    per cell (tags share cells and the same tags recur in a step's sketches: fewer BITFIELD ops)."""
    tags = list(dict.fromkeys(chain.from_iterable(sketches.values())))
    index = {tag: i for i, tag in enumerate(tags)}
    depth, size = cells.shape.depth, cells.shape.width * cells.shape.depth
    matrix = np.array([cells(tag) for tag in tags], dtype=np.int64).reshape(len(tags), depth)
    rows = []
    for counter in sketches.values():
        idx = np.fromiter(map(index.__getitem__, counter), dtype=np.int64, count=len(counter))
        counts = np.fromiter(counter.values(), dtype=np.int64, count=len(counter))
        summed = np.bincount(matrix[idx].ravel(), weights=np.repeat(counts, depth), minlength=size)
        ids = np.flatnonzero(summed)
        rows.append((idx, ids, summed[ids].astype(np.int64)))
    return tags, matrix.ravel(), rows
