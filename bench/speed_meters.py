"""Meters of the speed bench: CPU of given process trees (from /proc), and what each Redis server spent
(INFO cpu, commandstats, memory) between two moments, per node, so a cluster's masters can be compared.

Only processes and servers named here are measured: on a machine shared with other stacks, matching
processes by command line would count someone else's Kafka or Redis.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import redis as redis_py

from trendcore.keys import KeySpace
from trendcore.settings import Settings


def _proc_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, user + system clock ticks so far), for every process still running."""
    table = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the process ended meanwhile
        table[int(name)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    return table


def own_ticks(pid: int) -> int | None:
    """CPU clock ticks (user + system) a process used so far, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])


def busy_ticks() -> int:
    """CPU clock ticks every core of the machine spent on anything but idle and I/O wait so far (/proc/stat)."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in f.readline().split()[1:9])
    return user + nice + system + irq + softirq + steal


def tree_ticks(roots: list[int]) -> int:
    """CPU clock ticks of the processes `roots` and all their descendants still running."""
    table, total = _proc_table(), 0
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    todo = [p for p in roots if p in table]
    while todo:
        pid = todo.pop()
        total += table[pid][1]
        todo.extend(children.get(pid, ()))
    return total


def rss_kb(pid: int) -> int | None:
    """VmRSS of a process in kB, None when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


@dataclass
class RssSampler:
    """Resident memory (VmRSS, kB, summed per label) of labelled processes every `every_s`, in a thread of its
    own while it runs (a `with` block): how a process's memory grew over a run."""

    pids: dict[str, list[int]]
    every_s: float = 5.0
    samples: list[tuple[float, dict[str, int]]] = field(default_factory=list)  # (s since start, kB per label)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> RssSampler:
        began = time.monotonic()

        def sample() -> None:
            while True:
                found = {label: sum(filter(None, map(rss_kb, pids))) for label, pids in self.pids.items()}
                self.samples.append((time.monotonic() - began, found))
                if self._stop.wait(self.every_s):
                    return

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def series(self, points: list[float]) -> dict[str, list[int]]:
        """Per label: kB of the last sample at or before each of `points` (s since the start), and the peak."""
        def at(t: float) -> dict[str, int]:
            before = [kb for when, kb in self.samples if when <= t]
            return before[-1] if before else self.samples[0][1]

        return {label: [at(t).get(label, 0) for t in points] + [max(kb.get(label, 0) for _, kb in self.samples)]
                for label in self.pids}


class CpuMeter:
    """CPU time a record of labelled process trees over a run, and of this process itself (`own`)."""

    def __init__(self, trees: dict[str, list[int]]) -> None:
        self.trees = trees
        self.ticks = {label: tree_ticks(pids) for label, pids in trees.items()}
        self.own = time.process_time()

    def per_record_us(self, records: int, own: str | None = None) -> dict[str, float]:
        """µs of CPU a record per label (the trees must still run); `own` labels this process's share."""
        hz = os.sysconf("SC_CLK_TCK")
        seconds = {label: (tree_ticks(pids) - self.ticks[label]) / hz for label, pids in self.trees.items()}
        if own:
            seconds = {own: time.process_time() - self.own} | seconds
        return {label: s / records * 1e6 for label, s in seconds.items()}


def node_clients(s: Settings) -> list[redis_py.Redis]:
    """A plain client of each Redis server holding the settings' data: the one server (its database), or
    each master of a cluster (database 0)."""
    url = urlparse(s.redis.url)
    if s.redis.mode != "cluster":
        return [redis_py.Redis.from_url(s.redis.url, socket_timeout=30)]
    ports = s.stack.redis_cluster_ports or []
    return [redis_py.Redis(host=url.hostname, port=p, socket_timeout=30) for p in ports]


def flush(s: Settings) -> None:
    """Empty the bench's database on every node (the one server's bench database, or each cluster master)."""
    for node in node_clients(s):
        node.flushdb()
        node.close()


@dataclass(frozen=True)
class NodeStats:
    """One server's counters at a moment (or their difference between two)."""

    cpu_s: float  # used_cpu_sys + used_cpu_user
    calls: int  # commands run, every command of INFO commandstats
    usec: int  # µs spent in them
    used_memory: int

    @classmethod
    def of(cls, node: redis_py.Redis) -> NodeStats:
        cpu, memory = node.info("cpu"), node.info("memory")
        stats = node.info("commandstats").values()
        return cls(float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]), sum(int(c["calls"]) for c in stats),
                   sum(int(c["usec"]) for c in stats), int(memory["used_memory"]))

    def __sub__(self, other: NodeStats) -> NodeStats:
        return NodeStats(self.cpu_s - other.cpu_s, self.calls - other.calls, self.usec - other.usec,
                         self.used_memory - other.used_memory)


class RedisMeter:
    """What each Redis server of the settings spent since the meter was made (INFO, per node)."""

    def __init__(self, s: Settings) -> None:
        self.nodes = node_clients(s)
        self.start = [NodeStats.of(n) for n in self.nodes]
        self.commands = command_usec(self.nodes)

    def since(self) -> list[NodeStats]:
        return [NodeStats.of(n) - before for n, before in zip(self.nodes, self.start, strict=True)]

    def command_usec_since(self) -> dict[str, int]:
        """µs each command spent since, most first (INFO commandstats, every node; a command a script runs
        counts both in its own line and in the script's `evalsha`)."""
        now = command_usec(self.nodes)
        spent = {cmd: usec - self.commands.get(cmd, 0) for cmd, usec in now.items()}
        return {cmd: usec for cmd, usec in sorted(spent.items(), key=lambda kv: -kv[1]) if usec}

    def close(self) -> None:
        for n in self.nodes:
            n.close()


def command_usec(nodes: list[redis_py.Redis]) -> dict[str, int]:
    """µs spent so far per command (`evalsha`, `mget`, ...), every node together."""
    found: dict[str, int] = {}
    for node in nodes:
        for name, stats in node.info("commandstats").items():
            cmd = name.removeprefix("cmdstat_")
            found[cmd] = found.get(cmd, 0) + int(stats["usec"])
    return found


def redis_us(deltas: list[NodeStats], records: int) -> float:
    """µs of Redis CPU (every node) a record."""
    return sum(d.cpu_s for d in deltas) / records * 1e6


def family(keys: KeySpace, name: str) -> str:
    """The key family of a name: `part:<kind>` for partition state, `postlist:new|top`, else its first part."""
    bare = name.removeprefix(keys.prefix)
    if bare.startswith("part:"):
        try:
            return "part:" + keys.parse_part(name)[1]
        except ValueError:
            return "part:" + bare.split(":")[2]  # index, changed
    head = bare.split(":")
    return ":".join(head[:2]) if head[0] == "postlist" else head[0]


def key_memory(s: Settings) -> list[dict[str, tuple[int, int, int]]]:
    """Per node: family -> (keys, MEMORY USAGE bytes summed, the largest key's bytes)."""
    keys, found = KeySpace.of(s), []
    for node in node_clients(s):
        names = list(node.scan_iter(match=keys.match("*"), count=5000))
        pipe = node.pipeline(transaction=False)
        for name in names:
            pipe.memory_usage(name, samples=0)
        sizes: dict[str, tuple[int, int, int]] = {}
        for name, size in zip(names, pipe.execute(), strict=True):
            n, total, biggest = sizes.get(family(keys, name.decode()), (0, 0, 0))
            sizes[family(keys, name.decode())] = (n + 1, total + int(size or 0), max(biggest, int(size or 0)))
        found.append(sizes)
        node.close()
    return found


def summed(per_node: list[dict[str, tuple[int, int, int]]]) -> dict[str, tuple[int, int, int]]:
    """The families of every node together."""
    total: dict[str, tuple[int, int, int]] = {}
    for sizes in per_node:
        for kind, (n, size, biggest) in sizes.items():
            a, b, c = total.get(kind, (0, 0, 0))
            total[kind] = (a + n, b + size, max(c, biggest))
    return total
