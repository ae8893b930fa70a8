"""The layout writer the serving tests use (tests/integration/layout.py) writes sketches that read back
cell-compatible through BITFIELD, as the speed layer's do."""

from __future__ import annotations

import pytest

from tests.integration.layout import unique
from trendcore import keys
from trendcore.cms import CountMinSketch, cell_indexes

pytestmark = pytest.mark.integration


def test_written_sketch_reads_back_through_bitfield(writer, stack):
    tag = unique("cells")
    writer.sketch("AQ", "m", 1, {tag: 7, unique("other"): 3})
    cells = cell_indexes(tag, stack.sketch.shape)
    key = keys.cms("AQ", "m", 1)
    values = writer.client.bitfield_ro(key, "u32", f"#{cells[0]}", [("u32", f"#{c}") for c in cells[1:]])
    sketch = CountMinSketch.from_bytes(stack.sketch.shape, writer.client.get(key))
    assert min(values) >= 7 and sketch.estimate(tag) == min(values)
