"""`make notebooks` opens the analysts' notebooks in Jupyter: the server lists them and offers the venv's kernel."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

NOTEBOOKS = Path(__file__).parent.parent.parent / "notebooks"
EXPECTED = {"explore_trends.ipynb", "speed_vs_exact.ipynb", "tag_lookup.ipynb"}


def _get(url: str, token: str) -> dict:
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=5) as answer:
        return json.loads(answer.read())


def test_jupyter_lists_the_notebooks_with_the_venv_kernel(tmp_path):
    port = int(os.environ.get("PYTEST_TRENDS_BASE_PORT", "29000")) + 88
    token = secrets.token_hex(16)
    jupyter = Path(sys.executable).parent / "jupyter"
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path), "JUPYTER_CONFIG_DIR": str(tmp_path / "config")}
    proc = subprocess.Popen(
        [str(jupyter), "lab", "--no-browser", "--ip", "127.0.0.1", "--port", str(port), "--port-retries", "0",
         f"--IdentityProvider.token={token}", "--notebook-dir", str(NOTEBOOKS),
         *(["--allow-root"] if os.geteuid() == 0 else [])],  # as `make notebooks` does
        env=env, stdout=subprocess.DEVNULL, stderr=(tmp_path / "jupyter.log").open("wb"), start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                contents = _get(f"{base}/api/contents", token)
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "jupyter.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "jupyter lab did not answer within 60 s"
                time.sleep(0.5)
        names = {item["name"] for item in contents["content"] if item["type"] == "notebook"}
        assert EXPECTED <= names
        specs = _get(f"{base}/api/kernelspecs", token)
        assert "python3" in specs["kernelspecs"]
        notebook = _get(f"{base}/api/contents/explore_trends.ipynb", token)
        assert notebook["content"]["cells"], "the notebook opened empty"
    finally:
        proc.terminate()
        proc.wait(20)
