"""Bring the local stack up and down, idempotently, and report what runs where."""

from __future__ import annotations

import importlib
import importlib.util
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


INFRA: dict[str, Component] = {
    "redis": Component(redis.service, redis.start),
    "kafka": Component(kafka.service, kafka.start),
}
# Layers add their long-running processes by shipping `<layer>.stack` with a COMPONENTS dict;
# they start after the infrastructure, in this order.
LAYER_STACKS = ["speed.stack", "serving.stack", "batch.stack"]


def components() -> dict[str, Component]:
    """Infrastructure first, then each layer's services."""
    found = dict(INFRA)
    for module in LAYER_STACKS:
        if importlib.util.find_spec(module) is not None:
            found.update(importlib.import_module(module).COMPONENTS)
    return found


def up(settings: Settings, names: list[str] | None = None, log: Callable[[str], None] = print) -> None:
    """Start each component that is not running; refuse in plain words when a port is taken."""
    everything = components()
    for name in names or list(everything):
        comp = everything[name]
        svc = comp.service(settings)
        current = procs.state(svc)
        if current == "running":
            log(f"{name}: already running (pid {procs.read_pid(svc)}) on {svc.host}:{svc.port}")
        elif current == "foreign":
            raise StackError(
                f"{name}: port {svc.host}:{svc.port} is held by a process this stack did not start; "
                f"stop it or point TRENDS_ settings at another port"
            )
        else:
            if current == "stale":
                log(f"{name}: removing stale PID file {svc.pid_file} (process {procs.read_pid(svc)} is gone)")
                svc.pid_file.unlink(missing_ok=True)
            pid = comp.start(settings)
            log(f"{name}: started (pid {pid}) on {svc.host}:{svc.port}, log {svc.log_file}")
        if name == "kafka":
            _ensure_topics(settings, log)


def _ensure_topics(settings: Settings, log: Callable[[str], None]) -> None:
    created = kafka_io.ensure_topics(settings.kafka)
    if created:
        log(f"kafka: created topics {', '.join(created)} with {settings.kafka.partitions} partitions")


def down(settings: Settings, log: Callable[[str], None] = print) -> None:
    """Stop every component this stack started, newest first, by PID."""
    everything = components()
    for name in reversed(list(everything)):
        svc = everything[name].service(settings)
        if procs.stop(svc):
            log(f"{name}: stopped")
        else:
            log(f"{name}: not running")


def status(settings: Settings) -> list[dict[str, str]]:
    """One row per component: name, state, pid, address, log file."""
    rows = []
    for name, comp in components().items():
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
