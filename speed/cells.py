"""Sketch cells of a step's tags (pure): memoised cell indexes and each sketch's summed increments.

Used by the in-memory partition state (speed/state.py) and the merger.
"""

from __future__ import annotations

from collections import Counter
from itertools import chain

import numpy as np

from trendcore.cms import SketchShape, cell_indexes


class CellCache:
    """Cell indexes per tag, memoised (hashing is the hot path); cleared when it grows too big."""

    def __init__(self, shape: SketchShape, limit: int = 500_000) -> None:
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
