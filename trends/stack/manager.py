"""Bring the local stack up and down, idempotently, and report what runs where."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import batch.stack
import serving.stack
import speed.stack
from adapters import kafka as kafka_io
from trendcore.errors import StackError
from trendcore.process import ProcessSpec
from trendcore.settings import Settings
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
# Each layer lists its long-running processes as data; they start after the infrastructure, in this order.
LAYERS: list[Callable[[Settings], list[ProcessSpec]]] = [
    speed.stack.processes, serving.stack.processes, batch.stack.processes,
]


def _layer_component(name: str, layer: Callable[[Settings], list[ProcessSpec]]) -> Component:
    def spec(settings: Settings) -> ProcessSpec:
        return next(p for p in layer(settings) if p.name == name)

    return Component(lambda settings: procs.service_of(spec(settings), settings.stack.home / "run"),
                     lambda settings: procs.start_spec(spec(settings), settings.stack.home / "run"))


def components(settings: Settings | None = None) -> dict[str, Component]:
    """Infrastructure first, then each layer's processes."""
    settings = settings or Settings()
    found = dict(INFRA)
    for layer in LAYERS:
        found.update({p.name: _layer_component(p.name, layer) for p in layer(settings)})
    return found


def up(settings: Settings, names: list[str] | None = None, log: Callable[[str], None] = print) -> None:
    """Start each component that is not running; refuse in plain words when a port is taken."""
    everything = components(settings)
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
    everything = components(settings)
    for name in reversed(list(everything)):
        svc = everything[name].service(settings)
        if procs.stop(svc):
            log(f"{name}: stopped")
        else:
            log(f"{name}: not running")


def status(settings: Settings) -> list[dict[str, str]]:
    """One row per component: name, state, pid, address, log file."""
    rows = []
    for name, comp in components(settings).items():
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
