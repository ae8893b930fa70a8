"""What a layer runs as a long-lived process, as plain data the local stack starts and watches."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class ProcessSpec:
    """One long-running process of a layer: its command line, its address and how to tell it is ready.

    Layers describe their processes with these (`<layer>/stack.py: processes(settings)`); the local
    stack (`trends/stack`) owns starting, PID files and stopping, so no layer imports it.
    """

    name: str
    argv: list[str]
    host: str
    port: int
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    ready_url: str | None = None  # an HTTP URL that must answer 200; else the port accepting connections
    ready_timeout_s: float = 60.0
    prepare: Callable[[], None] | None = None  # run just before the start (a token file, a fresh metrics folder)
    banner: Callable[[], str] | None = None  # printed once ready (addresses, where the login is)


def die_with_parent() -> None:
    """In a child before it starts (a `preexec_fn`, Linux): have it sent SIGTERM when the thread that started it
    dies, even by SIGKILL, so a child in a session of its own is not left behind. Elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
