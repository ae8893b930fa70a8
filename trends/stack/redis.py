"""A Redis server (Debian's redis-server) on the project's port, with a project-local directory."""

from __future__ import annotations

import shutil
from urllib.parse import urlparse

from trendcore.errors import StackError
from trendcore.settings import Settings
from trends.stack import procs


def service(settings: Settings) -> procs.Service:
    url = urlparse(settings.redis.url)
    return procs.Service("redis", settings.stack.home / "run", url.hostname or "127.0.0.1", url.port or 6379)


def start(settings: Settings) -> int:
    """Start redis-server without persistence (the speed layer rebuilds from Kafka after a loss)."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise StackError("redis-server is not installed: run scripts/bootstrap.sh (it installs Debian's redis-server)")
    svc = service(settings)
    data = settings.stack.home / "redis"
    data.mkdir(parents=True, exist_ok=True)
    argv = [
        binary,
        "--bind", svc.host,
        "--port", str(svc.port),
        "--dir", str(data),
        "--save", "",
        "--appendonly", "no",
        "--daemonize", "no",
        "--protected-mode", "no",
        "--maxmemory-policy", "noeviction",
    ]
    pid = procs.start(svc, argv)
    procs.wait_ready(svc, settings.stack.start_timeout_s)
    return pid
