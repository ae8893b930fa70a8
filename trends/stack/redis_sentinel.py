"""A local Sentinel set: a master, one replica (--replicaof) and one Sentinel watching them.

Not a stack component (`trends up` runs the single Redis or a cluster): a helper that starts a real set on
three ports, for tests of TRENDS_REDIS__MODE=sentinel and failover, and stops it by PID like the stack does.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis as redis_py

from trendcore.errors import StackError
from trends.stack import procs


@dataclass(frozen=True)
class SentinelSet:
    """The three processes of a set and the name the Sentinel monitors the master under."""

    master: procs.Service
    replica: procs.Service
    sentinel: procs.Service
    name: str

    @property
    def services(self) -> list[procs.Service]:
        return [self.master, self.replica, self.sentinel]


def _redis_server() -> str:
    found = shutil.which("redis-server")
    if found is None:
        raise StackError("redis-server is not installed: run scripts/bootstrap.sh (it installs Debian's redis-server)")
    return found


def _server_args(svc: procs.Service, data: Path) -> list[str]:
    data.mkdir(parents=True, exist_ok=True)
    return [_redis_server(), "--bind", svc.host, "--port", str(svc.port), "--dir", str(data), "--save", "",
            "--appendonly", "no", "--protected-mode", "no", "--daemonize", "no",
            "--repl-diskless-sync-delay", "0"]  # a replica syncs at once (the default waits 5 s for others)


def _sentinel_conf(s: SentinelSet, folder: Path, down_after_ms: int, failover_timeout_ms: int) -> Path:
    """The Sentinel's configuration file (Sentinel rewrites it as it learns: it must be writable)."""
    conf = folder / "sentinel.conf"
    conf.write_text(
        f"port {s.sentinel.port}\nbind {s.sentinel.host}\nprotected-mode no\ndir {folder}\n"
        f"sentinel monitor {s.name} {s.master.host} {s.master.port} 1\n"
        f"sentinel down-after-milliseconds {s.name} {down_after_ms}\n"
        f"sentinel failover-timeout {s.name} {failover_timeout_ms}\n"
        f"sentinel parallel-syncs {s.name} 1\n")
    return conf


def start(home: Path, host: str, ports: tuple[int, int, int], name: str = "trends", down_after_ms: int = 1000,
          failover_timeout_ms: int = 5000, timeout_s: float = 60.0) -> SentinelSet:
    """Start master, replica and Sentinel (ports in that order) under `home`, and wait until the replica is in
    sync and the Sentinel knows it (it can then promote it)."""
    run = home / "run"
    s = SentinelSet(*(procs.Service(f"redis-sentinel-{role}", run, host, port)
                      for role, port in zip(("master", "replica", "sentinel"), ports, strict=True)), name=name)
    procs.start(s.master, _server_args(s.master, home / "master"))
    procs.wait_ready(s.master, timeout_s)
    procs.start(s.replica, [*_server_args(s.replica, home / "replica"), "--replicaof", host, str(s.master.port)])
    procs.wait_ready(s.replica, timeout_s)
    conf = _sentinel_conf(s, home, down_after_ms, failover_timeout_ms)
    procs.start(s.sentinel, [_redis_server(), str(conf), "--sentinel"])
    procs.wait_ready(s.sentinel, timeout_s)
    _wait(lambda: _replication(s.replica).get("master_link_status") == "up", timeout_s, "the replica to sync")
    _wait(lambda: _known_replicas(s) > 0, timeout_s, "the Sentinel to find the replica")
    return s


def master_address(s: SentinelSet) -> tuple[str, int] | None:
    """Where the Sentinel says the master is now (None when it does not answer)."""
    client = redis_py.Redis(host=s.sentinel.host, port=s.sentinel.port, socket_timeout=2, decode_responses=True)
    try:
        found = client.sentinel_get_master_addr_by_name(s.name)
        return (found[0], int(found[1])) if found else None
    except redis_py.RedisError:
        return None
    finally:
        client.close()


def stop(s: SentinelSet) -> None:
    """Stop the Sentinel, then the servers, by PID (a killed one only loses its PID file)."""
    for svc in reversed(s.services):
        procs.stop(svc, timeout_s=10)


def _replication(svc: procs.Service) -> dict:
    client = redis_py.Redis(host=svc.host, port=svc.port, socket_timeout=2)
    try:
        return client.info("replication")
    except redis_py.RedisError:
        return {}
    finally:
        client.close()


def _known_replicas(s: SentinelSet) -> int:
    client = redis_py.Redis(host=s.sentinel.host, port=s.sentinel.port, socket_timeout=2)
    try:
        return len(client.sentinel_slaves(s.name))
    except redis_py.RedisError:
        return 0
    finally:
        client.close()


def _wait(done: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() >= deadline:
            raise StackError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.2)
