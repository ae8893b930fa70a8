"""CPU share of each local-stack component over a few seconds, from /proc: what the background costs.

    .venv/bin/trends gen --rate 300 --duration 90 &   # with the stack up (trends up)
    sleep 30; .venv/bin/python bench/stack_cpu.py --seconds 30

During a freshness run of the speed bench (it generates its stream first, then produces for
--fresh-seconds):
    .venv/bin/python bench/speed_bench.py --only-freshness --fresh-rate 15000 --fresh-seconds 30 &
    sleep 30; .venv/bin/python bench/stack_cpu.py --seconds 20

Prints percent of one core per component (processes matched by their command line) and the total.
"""

from __future__ import annotations

import argparse
import os
import time

COMPONENTS = {
    "speed workers": "speed run --index",  # `python -m speed run` (the stack) or `trends speed run` (benches)
    "materializer": "speed materialize",
    "redis": "redis-server",
    "kafka": "kafka.Kafka",
    "generator": " gen ",
    "api": "granian",
    "speed bench": "bench/speed_bench.py",  # its producer and marker threads during a freshness run
}


def cpu_ticks() -> dict[str, int]:
    """user + system clock ticks so far, summed per component."""
    ticks: dict[str, int] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the process ended meanwhile
        for name, pattern in COMPONENTS.items():
            if pattern in cmd:
                ticks[name] = ticks.get(name, 0) + int(fields[11]) + int(fields[12])
    return ticks


def cpu_seconds_since(before: dict[str, int]) -> dict[str, float]:
    """CPU seconds each component spent since `before` (an earlier cpu_ticks())."""
    after, hz = cpu_ticks(), os.sysconf("SC_CLK_TCK")
    return {name: (after.get(name, 0) - before.get(name, 0)) / hz for name in COMPONENTS}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    before, started = cpu_ticks(), time.monotonic()
    time.sleep(args.seconds)
    spent, elapsed = cpu_seconds_since(before), time.monotonic() - started
    share = {name: 100 * seconds / elapsed for name, seconds in spent.items()}
    parts = ", ".join(f"{name} {pct:.1f}%" for name, pct in share.items())
    print(parts + f"; total {sum(share.values()):.1f}% of one core")


if __name__ == "__main__":
    main()
