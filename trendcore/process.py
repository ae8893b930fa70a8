"""What a layer runs as a long-lived process, as plain data the local stack starts and watches."""

from __future__ import annotations

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
