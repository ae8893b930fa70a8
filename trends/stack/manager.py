"""Bring the local stack up and down, idempotently, and report what runs where."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trendcore.errors import StackError
from trendcore.settings import Settings
from trends.adapters import kafka as kafka_io
from trends.stack import kafka, procs, redis


@dataclass(frozen=True)
class Component:
    """A stack component: how to describe its process and how to start it."""

    service: Callable[[Settings], procs.Service]
    start: Callable[[Settings], int]


COMPONENTS: dict[str, Component] = {
    "redis": Component(redis.service, redis.start),
    "kafka": Component(kafka.service, kafka.start),
}


def up(settings: Settings, names: list[str] | None = None, log: Callable[[str], None] = print) -> None:
    """Start each component that is not running; refuse in plain words when a port is taken."""
    for name in names or list(COMPONENTS):
        comp = COMPONENTS[name]
        svc = comp.service(settings)
        current = procs.state(svc)
        if current == "running":
            log(f"{name}: already running (pid {procs.read_pid(svc)}) on {svc.host}:{svc.port}")
            continue
        if current == "foreign":
            raise StackError(
                f"{name}: port {svc.host}:{svc.port} is held by a process this stack did not start; "
                f"stop it or point TRENDS_ settings at another port"
            )
        if current == "stale":
            log(f"{name}: removing stale PID file {svc.pid_file} (process {procs.read_pid(svc)} is gone)")
            svc.pid_file.unlink(missing_ok=True)
        pid = comp.start(settings)
        log(f"{name}: started (pid {pid}) on {svc.host}:{svc.port}, log {svc.log_file}")
    if "kafka" in (names or list(COMPONENTS)):
        created = kafka_io.ensure_topics(settings.kafka)
        if created:
            log(f"kafka: created topics {', '.join(created)} with {settings.kafka.partitions} partitions")


def down(settings: Settings, log: Callable[[str], None] = print) -> None:
    """Stop every component this stack started, newest first, by PID."""
    for name in reversed(list(COMPONENTS)):
        svc = COMPONENTS[name].service(settings)
        if procs.stop(svc):
            log(f"{name}: stopped")
        else:
            log(f"{name}: not running")


def status(settings: Settings) -> list[dict[str, str]]:
    """One row per component: name, state, pid, address, log file."""
    rows = []
    for name, comp in COMPONENTS.items():
        svc = comp.service(settings)
        pid = procs.read_pid(svc)
        rows.append(
            {
                "name": name,
                "state": procs.state(svc),
                "pid": str(pid) if pid else "-",
                "address": f"{svc.host}:{svc.port}",
                "log": str(svc.log_file),
            }
        )
    return rows
