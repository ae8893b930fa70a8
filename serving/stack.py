"""The API as a process of the local stack (granian workers, a generated token), described as data."""

from __future__ import annotations

import secrets
import sys
from pathlib import Path

from serving.metrics import MULTIPROC_ENV, fresh_multiproc_dir
from trendcore.process import ProcessSpec
from trendcore.settings import Settings, to_env


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


def argv(settings: Settings) -> list[str]:
    """granian (Rust HTTP/1) on its RSGI interface with the app factory, no websockets, no access log, failed
    workers respawned, a stopping worker killed after `stop_grace_s`. RSGI answers a cached GET /trending
    without ASGI messages (docs/decisions.md)."""
    api = settings.api
    return [
        sys.executable, "-m", "granian", "--interface", "rsgi", "--factory", "serving.rsgi:app_from_env",
        "--host", api.host, "--port", str(api.port), "--workers", str(api.workers),
        "--http", "1", "--no-ws", "--backlog", "4096", "--respawn-failed-workers", "--log-level", "warning",
        "--workers-kill-timeout", str(api.stop_grace_s),
    ]


def processes(settings: Settings) -> list[ProcessSpec]:
    """The API, ready when /healthz answers; its token file and a fresh metrics folder are made just before."""
    path = token_file(settings)
    configured = settings.model_copy(update={"api": settings.api.model_copy(update={"token_file": path})})
    metrics_dir = settings.stack.home / "run" / "api-metrics"
    api = settings.api

    def prepare() -> None:
        ensure_token(settings)
        fresh_multiproc_dir(metrics_dir)

    def banner() -> str:
        token = api.token or path.read_text().strip()
        return (f"api: dashboard http://{api.host}:{api.port}/  (API docs at /docs)\n"
                f"api: write token (Authorization: Bearer ...) in {path}: {token}")

    return [ProcessSpec(
        "api", argv(configured), api.host, api.port,
        env={**to_env(configured), MULTIPROC_ENV: str(metrics_dir)},
        ready_url=f"http://{api.host}:{api.port}/healthz", ready_timeout_s=settings.stack.start_timeout_s,
        prepare=prepare, banner=banner,
    )]
