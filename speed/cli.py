"""`trends speed ...`: run speed workers (one, or a local pool) and the trending materializer."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from typing import Annotated

import typer
from rich.console import Console

from trendcore.process import die_with_parent
from trendcore.settings import Settings

app = typer.Typer(help="Speed layer: Kafka -> count-min sketches in Redis, and trending snapshots.",
                  no_args_is_help=True)
console = Console(stderr=True)


@app.command()
def run(
    index: Annotated[int, typer.Option(help="Worker index: metrics port = speed.metrics_port + index.")] = 0,
    workers: Annotated[int, typer.Option(help="Start this many workers as child processes (a local pool).")] = 1,
) -> None:
    """Start a speed worker (a member of the consumer group), or a pool of them."""
    settings = Settings()
    _require_noeviction(settings, "the speed worker")
    if workers > 1:
        raise SystemExit(_pool(workers))
    from speed import metrics
    from speed.logs import setup
    from speed.worker import Worker

    setup("speed.worker")
    metrics.serve(settings.speed.metrics_port + index, settings.speed.metrics_host)
    Worker(settings, name=f"speed-{index}").run()


@app.command()
def materialize(
    once: Annotated[bool, typer.Option(help="Write one set of snapshots and exit.")] = False,
) -> None:
    """Write the trending snapshots every speed.materialize_every_s seconds (or once)."""
    settings = Settings()
    _require_noeviction(settings, "the materializer")
    from speed import metrics
    from speed.logs import setup
    from speed.materialize import Materializer

    setup("speed.materializer")
    if once:
        Materializer(settings).write_all()
        return
    metrics.serve(settings.speed.materializer_port, settings.speed.metrics_host)
    Materializer(settings).run()


def _require_noeviction(settings: Settings, who: str) -> None:
    """Refuse an evicting Redis before starting (adapters.redis.require_noeviction). A Redis that does not
    answer yet is no refusal: the worker and the materializer wait for it as before."""
    from adapters import redis as redis_io
    from trendcore.errors import EvictingRedis, ServiceError

    client = redis_io.client(settings.redis)
    try:
        redis_io.require_noeviction(client, who)
    except EvictingRedis:
        raise
    except ServiceError as exc:
        console.print(f"[yellow]warning:[/] eviction policy not checked: {exc}")
    finally:
        client.close()


CONFIG_EXIT = 78
"""A worker's exit code when it refused its configuration (sysexits' EX_CONFIG): a restart would refuse again."""


def _pool(workers: int) -> int:
    """Run `workers` worker processes; forward SIGTERM; restart one that dies (after a second), unless it refused
    its configuration: then stop them all and exit with its code, instead of restarting it forever."""
    def start(i: int) -> subprocess.Popen:
        # A session of its own: where the kernel groups CPU time by session (autogroup, on by default on most
        # desktops and many servers), each worker then gets a service's share, not half of one (see
        # docs/decisions.md). It still dies with the pool.
        return subprocess.Popen([sys.executable, "-m", "speed", "run", "--index", str(i)],
                                start_new_session=True, preexec_fn=die_with_parent)

    children = {i: start(i) for i in range(workers)}
    stopping = False

    def stop(_signum, _frame) -> None:
        nonlocal stopping
        stopping = True
        for child in children.values():
            child.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while not stopping:
        time.sleep(1.0)
        for i, child in list(children.items()):
            if child.poll() is None or stopping:
                continue
            if child.returncode == CONFIG_EXIT:
                console.print(f"speed-{i} refused its configuration (above); stopping the pool")
                stop(signal.SIGTERM, None)
                _wait_all(children.values())
                return CONFIG_EXIT
            console.print(f"speed-{i} exited with {child.returncode}; restarting")
            children[i] = start(i)
    _wait_all(children.values())
    return 0


def _wait_all(children) -> None:
    """Wait for stopped workers, killing those that take over 30 s."""
    for child in children:
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
