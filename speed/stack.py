"""The speed layer's part of the local stack: a pool of workers and the materializer, by PID file."""

from __future__ import annotations

import sys

from trendcore.settings import Settings
from trends.stack import procs
from trends.stack.manager import Component


def child_env(settings: Settings) -> dict[str, str]:
    """The sections a speed process reads, as JSON env values: children see the caller's settings."""
    sections = ("kafka", "redis", "sketch", "validation", "speed")
    return {f"TRENDS_{name.upper()}": getattr(settings, name).model_dump_json() for name in sections}


def _workers(settings: Settings) -> procs.Service:
    return procs.Service("speed-workers", settings.stack.home / "run", "127.0.0.1", settings.speed.metrics_port)


def _start_workers(settings: Settings) -> int:
    svc = _workers(settings)
    argv = [sys.executable, "-m", "speed", "run", "--workers", str(settings.speed.workers)]
    pid = procs.start(svc, argv, env=child_env(settings))
    procs.wait_ready(svc, settings.stack.start_timeout_s)
    return pid


def _materializer(settings: Settings) -> procs.Service:
    return procs.Service("speed-materializer", settings.stack.home / "run", "127.0.0.1", settings.speed.materializer_port)


def _start_materializer(settings: Settings) -> int:
    svc = _materializer(settings)
    pid = procs.start(svc, [sys.executable, "-m", "speed", "materialize"], env=child_env(settings))
    procs.wait_ready(svc, settings.stack.start_timeout_s)
    return pid


COMPONENTS: dict[str, Component] = {
    "speed-workers": Component(_workers, _start_workers),
    "speed-materializer": Component(_materializer, _start_materializer),
}
