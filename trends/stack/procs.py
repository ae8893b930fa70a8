"""Start, find and stop background processes by PID file; detect stale files and busy ports."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from trendcore.errors import StackError
from trendcore.process import ProcessSpec


@dataclass(frozen=True)
class Service:
    """A named process of the local stack: where its PID file and log live, which port it serves."""

    name: str
    run_dir: Path
    host: str
    port: int

    @property
    def pid_file(self) -> Path:
        return self.run_dir / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.run_dir / f"{self.name}.log"


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def any_port_open(addresses: Iterable[tuple[str, int]], timeout: float = 0.5) -> bool:
    """True when one of the (host, port) addresses accepts TCP connections: one live broker of a cluster is enough."""
    return any(port_open(host, port, timeout) for host, port in addresses)


def pid_alive(pid: int) -> bool:
    """True when the process exists and one of its threads has not finished exiting.

    Every thread, not just the leader's /proc/<pid>/stat: a leader that exits first shows as a zombie while
    its other threads still run, and those hold the process's files (its listening sockets) until the last
    one is gone, so a port could still answer after a `stop` that went by the leader alone."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return False
    return any(_task_running(task) for task in tasks)


def _task_running(task: Path) -> bool:
    """True when a thread (a /proc/<pid>/task/<tid> folder) exists and is neither zombie nor dead."""
    try:
        stat = task.joinpath("stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def read_pid(service: Service) -> int | None:
    """The PID recorded for a service, or None when there is no PID file."""
    try:
        return int(service.pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def state(service: Service) -> str:
    """One of: running, stale (PID file of a dead process), foreign (port held by another), stopped.

    Only for what this stack starts: external infrastructure is never ours, see manager.status.
    """
    pid = read_pid(service)
    if pid is not None and pid_alive(pid):
        return "running"
    if port_open(service.host, service.port):
        return "foreign"
    return "stale" if pid is not None else "stopped"


def start(service: Service, argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> int:
    """Start `argv` detached, logging to the service's log file; return its PID."""
    service.run_dir.mkdir(parents=True, exist_ok=True)
    with open(service.log_file, "ab") as log:
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,
        )
    service.pid_file.write_text(f"{proc.pid}\n")
    return proc.pid


def service_of(spec: ProcessSpec, run_dir: Path) -> Service:
    """The PID file, log and address of a layer's process."""
    return Service(spec.name, run_dir, spec.host, spec.port)


def start_spec(spec: ProcessSpec, run_dir: Path) -> int:
    """Start a layer's process, wait until it is ready, print its banner; return its PID."""
    svc = service_of(spec, run_dir)
    if spec.prepare is not None:
        spec.prepare()
    pid = start(svc, spec.argv, env=dict(spec.env), cwd=spec.cwd)
    wait_ready(svc, spec.ready_timeout_s, ready=None if spec.ready_url is None else lambda: http_ok(spec.ready_url))
    if spec.banner is not None:
        print(spec.banner(), file=sys.stderr)
    return pid


def http_ok(url: str) -> bool:
    """True when GET url answers 200 within a second."""
    try:
        with urllib.request.urlopen(url, timeout=1) as reply:
            return reply.status == 200
    except OSError:
        return False


def wait_ready(service: Service, timeout_s: float, ready=None) -> None:
    """Wait until the port accepts connections (and `ready()` is true); raise with the log's tail."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pid = read_pid(service)
        if pid is None or not pid_alive(pid):
            raise StackError(f"{service.name} exited during start-up:\n{tail(service.log_file)}")
        if port_open(service.host, service.port) and (ready is None or ready()):
            return
        time.sleep(0.25)
    raise StackError(f"{service.name} not ready on {service.host}:{service.port} after {timeout_s:.0f} s:\n"
                     f"{tail(service.log_file)}")


def stop(service: Service, timeout_s: float = 30.0) -> bool:
    """SIGTERM the service's whole process tree, SIGKILL what is left after the timeout.

    The tree, not just the process group: some services (Airflow standalone) start children in
    sessions of their own, which a group signal would miss. True if something was stopped.
    """
    pid = read_pid(service)
    if pid is None:
        return False
    stopped = False
    if pid_alive(pid):
        tree = [pid, *descendants(pid)]
        _signal_all(tree, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while any(pid_alive(p) for p in tree) and time.monotonic() < deadline:
            time.sleep(0.1)
        _signal_all([p for p in tree if pid_alive(p)], signal.SIGKILL)
        stopped = True
    service.pid_file.unlink(missing_ok=True)
    return stopped


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, read from /proc (children first found, grandchildren after)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _signal_all(pids: list[int], sig: int) -> None:
    if pids:
        try:
            os.killpg(pids[0], sig)  # the root's group too: reparented members are no longer in the tree
        except (ProcessLookupError, PermissionError):
            pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def tail(path: Path, lines: int = 15) -> str:
    """The last lines of a log file, for error messages."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
