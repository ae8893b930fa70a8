"""The soak (bench/soak.py) at its CI setting: a stack of its own under posts, reads and a worker kill -9,
passing every check of issue #26's soak (restarts, memory, error lines, held-back region, closed hours).

Its own stack, not the session's: the soak counts every process of a whole stack (Airflow included) and
kills one of its workers, on ports PYTEST_TRENDS_BASE_PORT + 100 on and in its own home beside the session's.
The rate is below the 5,000 posts/s of a run by hand: see docs/benchmarks.md for what 2 cores carry.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent.parent
MINUTES = 2.0
"""One kill at 40 s; memory measured from 85 s (after the rebalances the kill causes) on."""
POSTS_PER_S = 500
READS_PER_S = 500


def test_soak_at_its_short_setting_passes_every_check(tmp_path):
    base = int(os.environ.get("PYTEST_TRENDS_BASE_PORT", "29000"))
    out = tmp_path / "soak.json"
    argv = [sys.executable, str(ROOT / "bench" / "soak.py"), "--minutes", str(MINUTES),
            "--posts-per-s", str(POSTS_PER_S), "--reads-per-s", str(READS_PER_S), "--base-port", str(base + 100),
            "--home", str(ROOT / "var" / f"test-{base}-soak"), "--settle-s", "300", "--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert out.exists(), f"no summary; exit {done.returncode}:\n{done.stderr[-3000:]}"
    summary = json.loads(out.read_text())
    failed = [name for name, ok in summary["checks"].items() if not ok]
    assert not failed and done.returncode == 0, f"failed: {failed}\n{done.stdout}\n{done.stderr[-2000:]}"
    assert len(summary["kills"]) == 1 and all(summary["restarts"]["killed_replaced"].values())
    assert summary["produced"]["posts_per_s"] >= 0.9 * POSTS_PER_S
    # the reads' rate is reported, not checked (docs/benchmarks.md): a slower host's readers send fewer
    assert summary["reads"]["reads"] > 0 and summary["reads"]["failed"] == 0
    assert summary["held_back"]["tags"] >= 60 and not summary["held_back"]["below_truth"]
    assert summary["closed_hours"]["hours"] and summary["closed_hours"]["hours"][0]["mentions"] > 0
    measured = [role for role, m in summary["memory"].items() if m["measured"]]
    assert {"redis", "kafka", "api", "speed-1", "speed-materializer", "airflow scheduler"} <= set(measured), measured
