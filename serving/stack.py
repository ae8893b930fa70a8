"""The API as a local-stack component: granian workers in the background, a PID file, a generated token."""

from __future__ import annotations

import secrets
import sys
import urllib.request
from pathlib import Path

from serving.metrics import MULTIPROC_ENV, fresh_multiproc_dir
from trendcore.settings import Settings
from trends.stack import procs


def service(settings: Settings) -> procs.Service:
    return procs.Service("api", settings.stack.home / "run", settings.api.host, settings.api.port)


def token_file(settings: Settings) -> Path:
    """Where the local stack keeps the bearer token (var/api-token), unless one is configured."""
    return settings.api.token_file or settings.stack.home / "api-token"


def ensure_token(settings: Settings) -> Path:
    """Create a random token file (mode 600) once; reuse it on later starts."""
    path = token_file(settings)
    if not settings.api.token and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(32) + "\n")
    return path


def settings_env(settings: Settings) -> dict[str, str]:
    """The settings as TRENDS_<SECTION> JSON variables, so the workers see exactly the caller's settings."""
    return {f"TRENDS_{name.upper()}": getattr(settings, name).model_dump_json() for name in type(settings).model_fields}


def argv(settings: Settings) -> list[str]:
    """granian (Rust HTTP/1) on its RSGI interface with the app factory, no websockets, no access log, failed
    workers respawned. RSGI answers a cached GET /trending without ASGI messages (docs/decisions.md)."""
    api = settings.api
    return [
        sys.executable, "-m", "granian", "--interface", "rsgi", "--factory", "serving.rsgi:app_from_env",
        "--host", api.host, "--port", str(api.port), "--workers", str(api.workers),
        "--http", "1", "--no-ws", "--backlog", "4096", "--respawn-failed-workers", "--log-level", "warning",
    ]


def start(settings: Settings) -> int:
    """Start the API, wait until /healthz answers, print the dashboard address and the token."""
    path = ensure_token(settings)
    configured = settings.model_copy(update={"api": settings.api.model_copy(update={"token_file": path})})
    svc = service(settings)
    metrics_dir = fresh_multiproc_dir(settings.stack.home / "run" / "api-metrics")
    env = {**settings_env(configured), MULTIPROC_ENV: str(metrics_dir)}
    pid = procs.start(svc, argv(configured), env=env)
    procs.wait_ready(svc, settings.stack.start_timeout_s, ready=lambda: _healthy(settings))
    token = settings.api.token or path.read_text().strip()
    print(f"api: dashboard http://{settings.api.host}:{settings.api.port}/  (API docs at /docs)", file=sys.stderr)
    print(f"api: write token (Authorization: Bearer ...) in {path}: {token}", file=sys.stderr)
    return pid


def _healthy(settings: Settings) -> bool:
    try:
        with urllib.request.urlopen(f"http://{settings.api.host}:{settings.api.port}/healthz", timeout=1) as reply:
            return reply.status == 200
    except OSError:
        return False


def _components():
    from trends.stack.manager import Component

    return {"api": Component(service, start)}


COMPONENTS = _components()
