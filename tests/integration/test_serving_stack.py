"""The API as the local stack starts it (granian's RSGI interface over a real socket, PID file, generated
token), the RSGI fast path and bridge, and the dashboard rendered by headless Chromium showing the expected
top tag."""

from __future__ import annotations

import http.client
import json
import shutil
import subprocess
import urllib.request
from collections.abc import Iterable

import pytest

from adapters import redis as redis_io
from serving import stack as api_stack
from serving.routes.dashboard import STATIC
from tests.integration.layout import LayoutWriter, unique
from trendcore.process import ProcessSpec
from trends.stack import procs

pytestmark = pytest.mark.integration
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]


def api_spec(settings) -> ProcessSpec:
    """The API process as serving.stack describes it to the local stack."""
    return next(p for p in api_stack.processes(settings) if p.name == "api")


def api_service(settings) -> procs.Service:
    return procs.service_of(api_spec(settings), settings.stack.home / "run")


@pytest.fixture(scope="module")
def running_api(stack, tmp_path_factory):
    """The API component started exactly as `trends up` starts it (one worker), stopped by its PID afterwards."""
    home = tmp_path_factory.mktemp("api-home")
    settings = stack.model_copy(update={
        "stack": stack.stack.model_copy(update={"home": home}),
        "api": stack.api.model_copy(update={"workers": 1, "readiness_probe": "TF:1h:volume"}),
    })
    procs.start_spec(api_spec(settings), settings.stack.home / "run")
    try:
        yield settings
    finally:
        procs.stop(api_service(settings))


def fetch(settings, path: str, token: str | None = None,
          body: bytes | Iterable[bytes] | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}", "content-type": "application/json"} if token else {}
    request = urllib.request.Request(f"http://{settings.api.host}:{settings.api.port}{path}", data=body,
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def declare_only(settings, path: str, token: str, length: int) -> tuple[int, bytes]:
    """POST headers declaring a `length`-byte body and no body: the answer to the declaration alone (sending
    the body too races the server's refusal, which may close the socket while the client still writes)."""
    connection = http.client.HTTPConnection(settings.api.host, settings.api.port, timeout=10)
    try:
        connection.putrequest("POST", path)
        for name, value in (("Authorization", f"Bearer {token}"), ("content-type", "application/json"),
                            ("content-length", str(length))):
            connection.putheader(name, value)
        connection.endheaders()
        reply = connection.getresponse()
        return reply.status, reply.read()
    finally:
        connection.close()


def test_stack_component_serves_with_a_generated_token(running_api):
    token_file = running_api.stack.home / "api-token"
    token = token_file.read_text().strip()
    assert len(token) >= 32 and token_file.stat().st_mode & 0o077 == 0
    assert procs.state(api_service(running_api)) == "running"
    assert fetch(running_api, "/healthz")[0] == 200
    assert fetch(running_api, "/posts", token="wrong", body=b"[]")[0] == 401
    status, body = fetch(running_api, "/posts", token=token, body=b"[]")
    assert status == 422 and b"empty batch" in body  # the token was accepted


@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="Debian chromium is not installed (scripts/bootstrap.sh installs it)")
def test_dashboard_shows_the_expected_top_tag(running_api, tmp_path):
    top, second = unique("dashtop"), unique("dashsecond")
    client = redis_io.client(running_api.redis)
    writer = LayoutWriter(client, running_api.sketch.shape)
    writer.snapshot("TF", "1h", "volume", [(top, 900), (second, 400)])
    client.close()
    url = f"http://{running_api.api.host}:{running_api.api.port}/?region=TF&window=1h"
    dom = subprocess.run(
        ["chromium", *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000",
         "--dump-dom", url],
        capture_output=True, text=True, timeout=90, check=True,
    ).stdout
    first_item = dom.split('<ol id="trending"', 1)[1].split("</li>", 1)[0]
    assert f'data-tag="{top}"' in first_item and top.upper() in first_item
    assert f'data-tag="{second}"' in dom and "updated" in dom and 'class="selected"' in dom


def test_metrics_merge_the_workers_files(running_api):
    for _ in range(5):
        fetch(running_api, "/healthz")
    text = fetch(running_api, "/metrics")[1].decode()
    healthz = 'trends_api_requests_total{route="/healthz",status="200"}'
    line = next(x for x in text.splitlines() if x.startswith(healthz))
    assert float(line.split()[-1]) >= 5
    assert any((running_api.stack.home / "run" / "api-metrics").glob("*.db"))


def test_status_row_names_the_api(running_api):
    from trends.stack import manager

    rows = {row["name"]: row for row in manager.status(running_api)}
    assert rows["api"]["state"] == "running" and rows["api"]["address"].endswith(str(running_api.api.port))
    assert json.loads(fetch(running_api, "/regions")[1])[0] == "all"


def test_the_trending_fast_path_over_rsgi_answers_like_the_route(running_api):
    """The first request goes through the FastAPI route (over the RSGI-to-ASGI bridge) and caches the
    query; the second is the RSGI fast path's. Both give the same document."""
    top = unique("rsgitop")
    client = redis_io.client(running_api.redis)
    LayoutWriter(client, running_api.sketch.shape).snapshot("TF", "24h", "rise", [(top, 700), (unique("rsgi2"), 300)])
    client.close()
    path = "/trending?window=24h&region=TF&k=2&rank=rise"
    url = f"http://{running_api.api.host}:{running_api.api.port}{path}"
    answers = [urllib.request.urlopen(url, timeout=10) for _ in range(2)]
    docs = [json.loads(a.read()) for a in answers]
    for doc in docs:
        doc.pop("age_s")
    assert docs[0] == docs[1] and docs[0]["entries"][0]["tag"] == top
    assert all(a.headers["content-type"] == "application/json" and a.headers["cache-control"] == "max-age=1"
               for a in answers)
    metrics = fetch(running_api, "/metrics")[1].decode()
    fast = next(x for x in metrics.splitlines() if x.startswith('trends_api_trending_cache_total{outcome="fast"}'))
    assert float(fast.split()[-1]) >= 1


def test_the_rsgi_bridge_passes_paths_bodies_and_files(running_api):
    """What granian's RSGI interface hands over reaches FastAPI intact: a percent-encoded tag, a streamed
    static file, a request body read in parts (and refused over the limit), an error body."""
    status, body = fetch(running_api, "/tags/%23Caf%C3%A9/count?window=1h&region=all")
    assert status == 200 and json.loads(body)["tag"] == "café"
    assert fetch(running_api, "/static/app.js") == (200, (STATIC / "app.js").read_bytes())
    token = (running_api.stack.home / "api-token").read_text().strip()
    status, body = declare_only(running_api, "/posts", token, running_api.api.max_body_bytes + 10)
    assert status == 413 and b"at most" in body  # refused on the declared content-length, before any body
    chunks = (b" " * 65536 for _ in range(running_api.api.max_body_bytes // 65536 + 1))  # chunked: no length
    status, body = fetch(running_api, "/posts", token=token, body=chunks)
    assert status == 413 and b"over" in body
    status, body = fetch(running_api, "/posts", token=token, body=b'{"post_id": ')
    assert status == 422 and b"JSON" in body
    status, body = fetch(running_api, "/trending?window=2h&region=all")
    assert status == 422 and b"window" in body
