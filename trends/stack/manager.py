"""Bring the local stack up and down, idempotently, and report what runs where.

Redis and Kafka are the stack's infrastructure. With TRENDS_STACK__INFRA=local (the default) `up` starts
them and `down` stops them; with `external` they are someone else's: `up` only checks that they answer
(and creates the topics), `status` shows whether they are reachable, and `down` never touches them.
With TRENDS_STACK__REDIS_CLUSTER_PORTS the local Redis is a cluster: one component per node
(redis-cluster-1, ...) in place of `redis`.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from urllib.parse import urlparse

import batch.stack
import serving.stack
import speed.stack
from adapters import kafka as kafka_io
from adapters import redis as redis_io
from trendcore.errors import ServiceError, StackError
from trendcore.process import ProcessSpec
from trendcore.settings import Settings
from trends.stack import kafka, procs, redis, redis_cluster

REACHABLE, UNREACHABLE = "external (reachable)", "external (unreachable)"
"""The `status` states of external infrastructure (local components are running/stale/foreign/stopped)."""
SETTING = {"redis": "TRENDS_REDIS__URL", "kafka": "TRENDS_KAFKA__BOOTSTRAP"}
"""The setting that says where external infrastructure listens, named in errors."""


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


def infra(settings: Settings) -> dict[str, Component]:
    """Redis (or the nodes of the local Redis Cluster, when TRENDS_STACK__REDIS_CLUSTER_PORTS is set) and Kafka."""
    if not redis_cluster.ports(settings) or settings.stack.infra == "external":
        return dict(INFRA)
    nodes = {name: Component(partial(redis_cluster.service, index=i), partial(redis_cluster.start, index=i))
             for i, name in enumerate(redis_cluster.names(settings), start=1)}
    return {**nodes, "kafka": INFRA["kafka"]}


def components(settings: Settings | None = None) -> dict[str, Component]:
    """Infrastructure first, then each layer's processes."""
    settings = settings or Settings()
    found = infra(settings)
    for layer in LAYERS:
        found.update({p.name: _layer_component(p.name, layer) for p in layer(settings)})
    return found


def is_external(settings: Settings, name: str) -> bool:
    """True for Redis and Kafka when the settings say someone else runs them (TRENDS_STACK__INFRA=external)."""
    return name in INFRA and settings.stack.infra == "external"


def chosen(everything: dict[str, Component], names: list[str] | None) -> list[str]:
    """The components to act on, in stack order (infrastructure first); all of them when `names` is empty."""
    if not names:
        return list(everything)
    unknown = sorted(set(names) - set(everything))
    if unknown:
        raise StackError(f"unknown component{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                         f"the components are: {', '.join(everything)}")
    return [name for name in everything if name in names]


def up(settings: Settings, names: list[str] | None = None, log: Callable[[str], None] = print) -> None:
    """Start each component that is not running; refuse in plain words when a port is taken.

    External infrastructure is checked instead of started: a clear StackError naming the setting when
    it does not answer, so the services are never started against nothing.
    """
    everything = components(settings)
    for name in chosen(everything, names):
        if is_external(settings, name):
            check_external(settings, name, log)
        else:
            _start(settings, name, everything[name], log)
        if name == "kafka":
            create_topics(settings, log, quiet_when_present=True)


def _start(settings: Settings, name: str, comp: Component, log: Callable[[str], None]) -> None:
    """Start one component of ours unless it runs; a stale PID file is replaced, a foreign port refused."""
    svc = comp.service(settings)
    current = procs.state(svc)
    if current == "running":
        log(f"{name}: already running (pid {procs.read_pid(svc)}) on {svc.host}:{svc.port}")
        return
    if current == "foreign":
        hint = " or use it as external infrastructure (TRENDS_STACK__INFRA=external)" if name in infra(settings) else ""
        raise StackError(
            f"{name}: port {svc.host}:{svc.port} is held by a process this stack did not start; "
            f"stop it or point TRENDS_ settings at another port{hint}"
        )
    if current == "stale":
        log(f"{name}: removing stale PID file {svc.pid_file} (process {procs.read_pid(svc)} is gone)")
        svc.pid_file.unlink(missing_ok=True)
    pid = comp.start(settings)
    log(f"{name}: started (pid {pid}) on {svc.host}:{svc.port}, log {svc.log_file}")


def external_addresses(settings: Settings, name: str) -> list[tuple[str, int]]:
    """Where external Redis (TRENDS_REDIS__URL; its Sentinels in sentinel mode) or Kafka (every
    TRENDS_KAFKA__BOOTSTRAP server) listens."""
    if name == "redis" and settings.redis.mode == "sentinel":
        return settings.redis.sentinel_addresses()
    if name == "redis":
        url = urlparse(settings.redis.url)
        return [(url.hostname or "127.0.0.1", url.port or 6379)]
    found = []
    for server in settings.kafka.bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        if not port.isdigit():
            raise StackError(f"TRENDS_KAFKA__BOOTSTRAP: {server.strip()!r} is not host:port")
        found.append((host.strip("[]") or "127.0.0.1", int(port)))
    return found


def _shown(settings: Settings, name: str) -> str:
    """The external address as status and errors show it: never a password from the Redis URL."""
    return ",".join(f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
                    for host, port in external_addresses(settings, name))


def check_external(settings: Settings, name: str, log: Callable[[str], None]) -> None:
    """Raise StackError naming the setting unless the external Redis or Kafka answers with the configured
    security (Redis: a PING; Kafka: a metadata request, so a wrong password stops us here)."""
    where = _shown(settings, name)
    setting = "TRENDS_REDIS__SENTINELS" if name == "redis" and settings.redis.mode == "sentinel" else SETTING[name]
    if not procs.any_port_open(external_addresses(settings, name), timeout=2.0):
        raise StackError(
            f"{name}: nothing answers at {where} ({setting}), and TRENDS_STACK__INFRA=external says someone "
            f"else runs it; start it, correct {setting}, or set TRENDS_STACK__INFRA=local to let "
            "`trends up` start one"
        )
    if name == "redis":
        _ping_redis(settings, where)
    else:
        _ping_kafka(settings, where)
    log(f"{name}: external, answers at {where}")


def _ping_kafka(settings: Settings, where: str) -> None:
    """A metadata request with the configured security, so wrong credentials or TLS settings show up here."""
    try:
        kafka_io.ping(settings.kafka, timeout_s=10.0)
    except ServiceError as exc:
        raise StackError(f"kafka: the external Kafka at {where} answers but {exc}; check TRENDS_KAFKA__CLIENT "
                         "and TRENDS_KAFKA__SASL_PASSWORD") from exc


def _ping_redis(settings: Settings, where: str) -> None:
    """A PING through the project's own client, so a wrong password or TLS setting shows up here."""
    client = redis_io.client(settings.redis.model_copy(update={"retries": 0}))
    try:
        with redis_io.redis_errors(f"PING {where}"):
            client.ping()
    except ServiceError as exc:
        raise StackError(f"redis: the external Redis at {where} answers but {exc}; "
                         "check TRENDS_REDIS__URL (scheme rediss:// for TLS, user, password, database), "
                         "TRENDS_REDIS__PASSWORD and TRENDS_REDIS__CA_FILE") from exc
    finally:
        client.close()


def create_topics(settings: Settings, log: Callable[[str], None] = print, quiet_when_present: bool = False) -> None:
    """Create the missing topics on the local or external Kafka (`trends up`, `trends kafka create-topics`) with
    the configured partitions, replication factor, min.insync.replicas and retention.ms, over the configured
    security; say what was created and (unless `quiet_when_present`) which existed already, left as they are."""
    k = settings.kafka
    try:
        created = kafka_io.ensure_topics(k)
    except ServiceError as exc:
        raise StackError(f"kafka: could not make sure the topics exist on {_shown(settings, 'kafka')}: {exc}; "
                         "check TRENDS_KAFKA__BOOTSTRAP and the other TRENDS_KAFKA__ settings") from exc
    if created:
        log(f"kafka: created topics {', '.join(created)} with {k.partitions} partitions, replication factor "
            f"{k.replication_factor}, min.insync.replicas {k.min_insync_replicas}, retention.ms {k.retention_ms}")
    present = [t for t in k.topics if t not in created]
    if present and not quiet_when_present:
        log(f"kafka: topics {', '.join(present)} exist already on {_shown(settings, 'kafka')} (left as they are)")


def down(settings: Settings, log: Callable[[str], None] = print, names: list[str] | None = None) -> None:
    """Stop every component this stack started (or those of `names`) by PID; external infrastructure is left
    alone. The layers' processes go first, all at once, then the infrastructure they write to (a worker's last
    checkpoint needs Redis and Kafka), all at once: a graceful stop can take seconds and none waits for another."""
    everything = components(settings)
    for tier in stop_tiers(chosen(everything, names), set(infra(settings))):
        with ThreadPoolExecutor(max_workers=len(tier), thread_name_prefix="stop") as pool:
            said = list(pool.map(partial(_stop_one, settings, everything), tier))
        for line in said:
            log(line)


def stop_tiers(selected: list[str], infrastructure: set[str]) -> list[list[str]]:
    """The order `down` stops in: the layers' processes (newest first), then the infrastructure; empty tiers
    left out. Each tier's members stop at once."""
    layers = [name for name in reversed(selected) if name not in infrastructure]
    tiers = [layers, [name for name in reversed(selected) if name in infrastructure]]
    return [tier for tier in tiers if tier]


def _stop_one(settings: Settings, everything: dict[str, Component], name: str) -> str:
    """Stop one component of ours; what happened, as a line."""
    svc = everything[name].service(settings)
    if is_external(settings, name):
        return f"{name}: external, left alone{_leftover(svc)}"
    return f"{name}: stopped" if procs.stop(svc) else f"{name}: not running"


def _leftover(svc: procs.Service) -> str:
    """A note when a local instance this stack started before the switch to external still runs."""
    if procs.read_pid(svc) is None or procs.state(svc) != "running":
        return ""
    return (f" (a local {svc.name} this stack started earlier still runs, pid {procs.read_pid(svc)}: "
            "`TRENDS_STACK__INFRA=local trends down` stops it)")


def status(settings: Settings) -> list[dict[str, str]]:
    """One row per component: name, state, pid, address, log; external infrastructure as reachable or not."""
    rows = []
    for name, comp in components(settings).items():
        if is_external(settings, name):
            answers = procs.any_port_open(external_addresses(settings, name))
            rows.append({"name": name, "state": REACHABLE if answers else UNREACHABLE, "pid": "-",
                         "address": _shown(settings, name), "log": "-"})
            continue
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
