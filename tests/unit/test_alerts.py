"""Alert rules: valid for promtool, each fires on its own test series, and names real metrics."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parent.parent.parent
OPS = ROOT / "ops"

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool comes from scripts/bootstrap.sh")


def test_promtool_checks_the_rules():
    result = subprocess.run(["promtool", "check", "rules", "alerts.yml"], cwd=OPS, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_fires_in_its_promtool_unit_test():
    result = subprocess.run(["promtool", "test", "rules", "alerts_test.yml"], cwd=OPS, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    groups = yaml.safe_load((OPS / "alerts.yml").read_text())["groups"]
    cases = yaml.safe_load((OPS / "alerts_test.yml").read_text())["tests"]
    rules = {r["alert"] for g in groups for r in g["rules"]}
    tested = {t["alertname"] for case in cases for t in case["alert_rule_test"]}
    assert rules == tested


def test_rules_only_name_metrics_the_code_exports():
    exprs = " ".join(r["expr"] for g in yaml.safe_load((OPS / "alerts.yml").read_text())["groups"] for r in g["rules"])
    names = set(re.findall(r"\b((?:speed|trends)_[a-z_]+)\b", exprs))
    source = " ".join(p.read_text() for folder in ("speed", "serving", "batch") for p in (ROOT / folder).rglob("*.py"))
    exported = {n for n in names if n in source or n.removesuffix("_total") in source}
    assert names == exported, f"not exported anywhere: {sorted(names - exported)}"
