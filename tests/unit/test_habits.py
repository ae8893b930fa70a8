"""Habits the history keeps: commit subjects of at most 72 characters (the why goes in the body)."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SINCE = "00e1ee7"  # the first commit made under this rule; older subjects ran long


def _subjects() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    done = subprocess.run(["git", "log", "--format=%s", f"{SINCE}^..HEAD"], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"history before {SINCE} not available: {done.stderr.strip()}")
    return done.stdout.splitlines()


def test_commit_subjects_fit_in_72_characters():
    assert [s for s in _subjects() if len(s) > 72] == []
