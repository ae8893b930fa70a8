"""The speed layer's long-running processes, as data for the local stack: the worker pool and the materializer."""

from __future__ import annotations

import sys

from trendcore.process import ProcessSpec
from trendcore.settings import Settings, to_env


def processes(settings: Settings) -> list[ProcessSpec]:
    """A pool of `settings.speed.workers` workers (ready when its metrics port answers), then the materializer."""
    speed, env = settings.speed, to_env(settings)
    return [
        ProcessSpec("speed-workers", [sys.executable, "-m", "speed", "run", "--workers", str(speed.workers)],
                    "127.0.0.1", speed.metrics_port, env=env, ready_timeout_s=settings.stack.start_timeout_s),
        ProcessSpec("speed-materializer", [sys.executable, "-m", "speed", "materialize"],
                    "127.0.0.1", speed.materializer_port, env=env, ready_timeout_s=settings.stack.start_timeout_s),
    ]
