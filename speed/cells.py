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
    per cell (tags share cells and the same tags recur in a step's sketches: fewer BITFIELD ops).

    All sketches are summed in one pass: each cell is numbered `sketch * cells + cell`, so one sort
    (np.unique) finds every sketch's distinct cells in order; a bincount per sketch over its whole
    width would cost more than the step's few tags in most (regional minute) sketches."""
    tags = list(dict.fromkeys(chain.from_iterable(sketches.values())))
    index = {tag: i for i, tag in enumerate(tags)}
    depth, size = cells.shape.depth, cells.shape.width * cells.shape.depth
    matrix = np.array([cells(tag) for tag in tags], dtype=np.int64).reshape(len(tags), depth)
    sizes = [len(counter) for counter in sketches.values()]
    total = sum(sizes)
    idx = np.fromiter(map(index.__getitem__, chain.from_iterable(sketches.values())), dtype=np.int64, count=total)
    counts = np.fromiter(chain.from_iterable(c.values() for c in sketches.values()), dtype=np.int64, count=total)
    numbered = (np.repeat(np.arange(len(sizes), dtype=np.int64) * size, sizes)[:, None] + matrix[idx]).ravel()
    distinct, where = np.unique(numbered, return_inverse=True)
    summed = np.bincount(where, weights=np.repeat(counts, depth)).astype(np.int64)
    bounds = np.searchsorted(distinct, np.arange(len(sizes) + 1, dtype=np.int64) * size).tolist()
    starts = np.cumsum([0, *sizes]).tolist()
    rows = [(idx[starts[i]:starts[i + 1]], distinct[bounds[i]:bounds[i + 1]] - i * size,
             summed[bounds[i]:bounds[i + 1]]) for i in range(len(sizes))]
    return tags, matrix.ravel(), rows
