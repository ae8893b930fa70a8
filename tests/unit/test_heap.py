"""adapters.heap: freed state goes back to the OS, not kept at the process's high-water mark."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from adapters import heap


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim, /proc")
def test_freed_sketches_leave_the_resident_memory_after_a_trim():
    """3,000 sketches of the default shape (13,595 u32 counters, 54 KB: below glibc's mmap threshold), with
    small survivors between them as a worker's heap has: freeing them alone leaves the RSS up."""
    heap.trim()  # free pages an earlier test left would otherwise take the sketches unseen
    before = _rss_mb()
    sketches, survivors = [], []
    for i in range(3_000):
        sketch = np.zeros(13_595, dtype=np.uint32)
        sketch[::1_000] = i  # touched, so resident
        sketches.append(sketch)
        if i % 10 == 0:
            survivors.append(np.ones(100))
    held = _rss_mb() - before
    del sketches
    assert heap.trim()
    after = _rss_mb() - before
    assert held > 120 and after < held / 4, (held, after)
