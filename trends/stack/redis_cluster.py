"""A local Redis Cluster (`stack.redis_cluster_ports`): that many masters, no replicas, in place of the single Redis.

Each node is a redis-server with cluster mode on, in its own folder (redis-cluster/<port> under the stack
home, where its nodes.conf lives); once every node runs, `redis-cli --cluster create` joins them when none
holds slots yet (a restarted cluster re-forms from its nodes.conf), and the start waits for
`cluster_state:ok`. A local stand-in for a managed cluster (TRENDS_REDIS__MODE=cluster); no persistence,
as for the single Redis.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from urllib.parse import urlparse

import redis as redis_py

from trendcore.errors import StackError
from trendcore.settings import Settings
from trends.stack import procs

NODE_TIMEOUT_MS = 5000
"""cluster-node-timeout: how long a node may not answer before the others mark it failing."""


def ports(settings: Settings) -> list[int]:
    """The configured node ports ([] when the stack runs the single Redis)."""
    return list(settings.stack.redis_cluster_ports or [])


def bus_port(settings: Settings, index: int) -> int:
    """The cluster bus port of node `index` (1-based): the configured one, else Redis's default port + 10000."""
    bus = settings.stack.redis_cluster_bus_ports
    return bus[index - 1] if bus else ports(settings)[index - 1] + 10000


def names(settings: Settings) -> list[str]:
    """The stack component names of the nodes, in port order: redis-cluster-1, redis-cluster-2, ..."""
    return [f"redis-cluster-{i}" for i in range(1, len(ports(settings)) + 1)]


def service(settings: Settings, index: int) -> procs.Service:
    """Node `index` (from 1): its PID file and log under run/, its port."""
    host = urlparse(settings.redis.url).hostname or "127.0.0.1"
    return procs.Service(f"redis-cluster-{index}", settings.stack.home / "run", host, ports(settings)[index - 1])


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise StackError(f"{name} is not installed: run scripts/bootstrap.sh (it installs Debian's redis-server)")
    return found


def _check_url(settings: Settings) -> None:
    """The services must reach this cluster as one: cluster mode, a URL naming one of its nodes."""
    url = urlparse(settings.redis.url)
    if settings.redis.mode != "cluster" or url.port not in ports(settings):
        raise StackError(f"TRENDS_STACK__REDIS_CLUSTER_PORTS={ports(settings)} makes the local Redis a cluster: set "
                         f"TRENDS_REDIS__MODE=cluster and TRENDS_REDIS__URL=redis://127.0.0.1:{ports(settings)[0]}/0")


def start(settings: Settings, index: int) -> int:
    """Start node `index`; when it is the last one to run, join the nodes into a cluster and wait until it
    serves every slot. Returns the node's PID."""
    _check_url(settings)
    svc = service(settings, index)
    data = settings.stack.home / "redis-cluster" / str(svc.port)
    data.mkdir(parents=True, exist_ok=True)
    argv = [
        _binary("redis-server"),
        "--bind", svc.host,
        "--port", str(svc.port),
        "--cluster-enabled", "yes",
        "--cluster-port", str(bus_port(settings, index)),
        "--cluster-config-file", str(data / "nodes.conf"),
        "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
        "--dir", str(data),
        "--save", "",
        "--appendonly", "no",
        "--daemonize", "no",
        "--protected-mode", "no",
        "--maxmemory", settings.stack.redis_maxmemory,
        "--maxmemory-policy", "noeviction",
    ]
    pid = procs.start(svc, argv)
    procs.wait_ready(svc, settings.stack.start_timeout_s)
    nodes = [service(settings, i) for i in range(1, len(ports(settings)) + 1)]
    if all(procs.state(node) == "running" for node in nodes):
        join(nodes, settings.stack.start_timeout_s)
    return pid


def _info(node: procs.Service) -> dict:
    """CLUSTER INFO of a node, parsed ({} when it does not answer)."""
    client = redis_py.Redis(host=node.host, port=node.port, socket_timeout=2, socket_connect_timeout=1)
    try:
        return client.execute_command("CLUSTER INFO")
    except redis_py.RedisError:
        return {}
    finally:
        client.close()


def join(nodes: list[procs.Service], timeout_s: float) -> None:
    """Create the cluster when no node holds a slot yet (each master gets a third of the slots), then wait
    until every node says cluster_state:ok."""
    if all(int(_info(node).get("cluster_slots_assigned", 0)) == 0 for node in nodes):
        argv = [_binary("redis-cli"), "--cluster", "create", *(f"{n.host}:{n.port}" for n in nodes),
                "--cluster-replicas", "0", "--cluster-yes"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
        if done.returncode != 0:
            raise StackError(f"redis-cli --cluster create failed:\n{(done.stdout + done.stderr).strip()[-2000:]}")
    wait_ok(nodes, timeout_s)


def wait_ok(nodes: list[procs.Service], timeout_s: float) -> None:
    """Wait until every node reports cluster_state:ok; StackError naming the ones that do not."""
    deadline = time.monotonic() + timeout_s
    while True:
        states = {f"{n.host}:{n.port}": _info(n).get("cluster_state", "no answer") for n in nodes}
        if all(state == "ok" for state in states.values()):
            return
        if time.monotonic() >= deadline:
            raise StackError(f"the local Redis Cluster is not ok after {timeout_s:.0f} s ({states}); a node that "
                             "lost its nodes.conf cannot rejoin: stop the stack and delete redis-cluster/ under "
                             "the stack home to make a new cluster")
        time.sleep(0.25)
