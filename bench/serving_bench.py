"""GET /trending throughput and latency with wrk, side by side with redis-benchmark GET of the same
snapshot key (the ceiling: one Redis read per request, no HTTP, no Python).

Run with the stack up (`.venv/bin/trends up`: Redis, Kafka, the speed workers and materializer):
    .venv/bin/python bench/serving_bench.py [--workers 2] [--connections 64] [--seconds 15] [--rounds 3]
        [--port 8790] [--ingest-rate 1000]
With --ingest-rate, `trends gen --rate` runs for the whole measurement so the speed layer ingests meanwhile; the
bench first waits until the speed layer has caught up (steady ingestion) unless --backlog.
It starts the API with the stack's exact command line (granian, RSGI) on --port, and beside it, interleaved:
the same app on granian's ASGI interface (what the RSGI fast path saves), granian serving fixed bytes (what the
server itself costs), the API under uvicorn + httptools (a common ASGI server, for comparison), and
redis-benchmark GET. It writes a 100-entry snapshot when none exists for `--region`, and stops every server it
started.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from adapters import kafka as kafka_io
from adapters import redis as redis_io
from serving.metrics import MULTIPROC_ENV, fresh_multiproc_dir
from serving.stack import argv as api_argv
from trendcore.events import format_time
from trendcore.keys import KeySpace
from trendcore.settings import Settings, to_env
from trendcore.snapshot import Snapshot, TrendEntry


def ensure_snapshot(settings: Settings, region: str) -> str:
    """The snapshot key to read; a synthetic 100-entry snapshot is written when none exists."""
    key = KeySpace.of(settings).trending(region, "1h", "volume")
    client = redis_io.client(settings.redis)
    if not client.exists(key):
        now = int(time.time() * 1000)
        entries = [TrendEntry(rank=i, tag=f"benchtag{i}", display=f"BenchTag{i}", count=10_000 - i * 37,
                              upper_bound=10_000 - i * 37, lower_bound=9_900 - i * 37, source="approx",
                              authors=5_000 - i, rank_change=(i % 5) - 2, score=None, baseline=None)
                   for i in range(1, 101)]
        doc = Snapshot(region=region, window="1h", rank="volume", computed_at=format_time(now), computed_at_ms=now,
                       total=1_234_567, error_bound=1235, entries=entries)
        client.set(key, doc.model_dump_json(), ex=3600)
    client.close()
    return key


UVICORN = ["--loop", "uvloop", "--http", "httptools", "--no-access-log", "--no-server-header", "--backlog", "4096"]


SERVERS = ("api", "asgi", "hello", "uvicorn")


def server_argv(settings: Settings, server: str) -> list[str]:
    """`api`, `asgi` and `hello` use the stack's granian command line (`asgi`: the same app on granian's ASGI
    interface; `hello`: fixed bytes); `uvicorn` runs the same app under uvicorn."""
    argv = api_argv(settings)
    target = argv.index("serving.rsgi:app_from_env")
    if server == "hello":
        argv[target] = "bench.serving_hello:app"
        argv.remove("--factory")
    elif server == "asgi":
        argv[target], argv[argv.index("rsgi")] = "serving.app:app_from_env", "asgi"
    elif server == "uvicorn":
        api = settings.api
        argv = [sys.executable, "-m", "uvicorn", "serving.app:app_from_env", "--factory", "--host", api.host,
                "--port", str(api.port), "--workers", str(api.workers), *UVICORN]
    return argv


def start_api(settings: Settings, log: Path, server: str = "api") -> subprocess.Popen:
    """Start one server (see `server_argv`); returns once /healthz answers."""
    metrics_dir = fresh_multiproc_dir(Path(tempfile.mkdtemp(prefix="serving-bench-metrics-")))
    env = {**to_env(settings), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
           MULTIPROC_ENV: str(metrics_dir)}
    proc = subprocess.Popen(server_argv(settings, server), env=env,
                            stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://{settings.api.host}:{settings.api.port}/healthz"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return proc
        except OSError:
            time.sleep(0.2)
    stop(proc)
    raise SystemExit(f"{server} did not start, see {log}")


def stop(proc: subprocess.Popen) -> None:
    """Stop a server and its workers (its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def run_wrk(url: str, connections: int, seconds: int, threads: int) -> dict:
    """requests/s, p50 and p99 (ms) from `wrk --latency`."""
    cmd = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency", url]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    lat = {p: _ms(re.search(rf"\s{p}%\s+([\d.]+\w+)", out).group(1)) for p in ("50", "99")}
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"cmd": " ".join(cmd), "rps": rps, "p50": lat["50"], "p99": lat["99"],
            "non2xx": int(errors.group(1)) if errors else 0}


def _ms(text: str) -> float:
    value, unit = re.match(r"([\d.]+)(\w+)", text).groups()
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def run_redis_benchmark(settings: Settings, key: str, connections: int, requests: int) -> dict:
    """GET of the snapshot key straight from Redis: requests/s and p50/p99 (ms)."""
    url = urlparse(settings.redis.url)
    cmd = ["redis-benchmark", "-h", url.hostname or "127.0.0.1", "-p", str(url.port or 6379), "-c", str(connections),
           "-n", str(requests), "--csv", "GET", key]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()
    row = dict(zip([h.strip('"') for h in out[0].split(",")], [v.strip('"') for v in out[-1].split(",")], strict=True))
    return {"cmd": " ".join(cmd), "rps": float(row["rps"]), "p50": float(row["p50_latency_ms"]),
            "p99": float(row["p99_latency_ms"])}


def median(rows: list[dict]) -> dict:
    """The run with the median requests/s (its own latencies, not mixed across runs)."""
    return sorted(rows, key=lambda r: r["rps"])[len(rows) // 2]


def measure(settings: Settings, url: str, args, server: str) -> dict:
    """One server, a 2 s warm-up, then the measured wrk run."""
    proc = start_api(settings, Path(tempfile.gettempdir()) / f"serving-bench-{server}.log", server=server)
    try:
        run_wrk(url, args.connections, 2, args.threads)
        return run_wrk(url, args.connections, args.seconds, args.threads)
    finally:
        stop(proc)


def start_ingest(rate: float) -> subprocess.Popen | None:
    """`trends gen --rate` in the background for the whole run, so the speed layer ingests while we measure."""
    if rate <= 0:
        return None
    trends = str(Path(sys.executable).parent / "trends")
    return subprocess.Popen([trends, "gen", "--rate", str(rate)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def _ends(settings: Settings) -> dict[tuple[str, int], int]:
    """End offset of every partition of the two input topics."""
    k = settings.kafka
    return {(t, p): o for t in (k.posts_topic, k.engagements_topic) for p, o in kafka_io.end_offsets(k, t).items()}


def consumed(settings: Settings, partitions: list[tuple[str, int]] | None = None) -> int:
    """Records the speed layer has checkpointed so far (sum of its partitions' stored offsets)."""
    keys = KeySpace.of(settings)
    names = [keys.part_offset(p, t) for t, p in (partitions or list(_ends(settings)))]
    client = redis_io.client(settings.redis)
    try:
        return sum(int(v) for v in client.mget(names) if v is not None)
    finally:
        client.close()


def lag(settings: Settings) -> int:
    """Records in Kafka the speed layer has not applied yet (end offsets minus stored offsets)."""
    ends = _ends(settings)
    return sum(ends.values()) - consumed(settings, list(ends))


def wait_drained(settings: Settings, rate: float, timeout_s: float = 600.0) -> int:
    """Wait until the backlog is under two seconds of the ingest rate, so we measure steady ingestion, not a
    backlog being drained (which takes every core it can get); returns the lag seen last."""
    limit, deadline = max(2_000, int(rate * 3 * 2)), time.monotonic() + timeout_s  # ~3 records per post
    while (behind := lag(settings)) > limit:
        if time.monotonic() > deadline:
            raise SystemExit(f"the speed layer is still {behind:,} records behind after {timeout_s:.0f} s: "
                             "start it (trends up) or wait for it to catch up")
        print(f"speed layer {behind:,} records behind, waiting for it to catch up", flush=True)
        time.sleep(5)
    return behind


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="wrk threads (it shares the 2 cores with the server)")
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--port", type=int, default=8790)
    parser.add_argument("--region", default="all")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ingest-rate", type=float, default=0.0, help="posts/s generated while measuring (0: none)")
    parser.add_argument("--backlog", action="store_true",
                        help="with --ingest-rate: measure at once, while the speed layer may still drain a backlog")
    args = parser.parse_args()
    for tool in ("wrk", "redis-benchmark"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (scripts/bootstrap.sh installs it)")
    base = Settings()
    settings = base.model_copy(update={"api": base.api.model_copy(update={"workers": args.workers, "port": args.port})})
    key = ensure_snapshot(settings, args.region)
    load_before = f"{os.getloadavg()[0]:.2f}"
    url = f"http://{settings.api.host}:{settings.api.port}/trending?window=1h&region={args.region}&k=10&rank=volume"
    runs: dict[str, list[dict]] = {name: [] for name in (*SERVERS, "redis")}
    ingest = start_ingest(args.ingest_rate)
    try:
        behind = wait_drained(settings, args.ingest_rate) if ingest is not None and not args.backlog else None
        applied_before, started = consumed(settings), time.monotonic()
        for _ in range(args.rounds):  # interleaved, so background load hits all five alike
            for server in SERVERS:
                runs[server].append(measure(settings, url, args, server))
            requests = max(100_000, int(runs["api"][-1]["rps"] * args.seconds))
            runs["redis"].append(run_redis_benchmark(settings, key, args.connections, requests))
    finally:
        if ingest is not None:
            stop(ingest)
    ingested = (consumed(settings) - applied_before) / (time.monotonic() - started)
    api, asgi, hello, uvicorn, ceiling = (median(runs[name]) for name in (*SERVERS, "redis"))
    per_round = ", ".join(format(r["rps"], ",.0f") for r in runs["api"])
    print(f"medians of {args.rounds} interleaved rounds; API req/s per round: {per_round}")
    print(f"{'':28}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}")
    for label, row, api_server in [("GET /trending (API)", api, True), ("API on ASGI", asgi, True),
                                   ("granian fixed bytes", hello, False), ("API under uvicorn", uvicorn, True),
                                   ("redis GET (ceiling)", ceiling, False)]:
        errors = f"   non-2xx: {row['non2xx']}" if api_server else ""
        print(f"{label:28}{row['rps']:>10,.0f}{row['p50']:>9.2f}{row['p99']:>9.2f}{errors}")
    print(f"load average before/after: {load_before} / {os.getloadavg()[0]:.2f}; "
          f"speed layer applied {ingested:,.0f} records/s meanwhile (--ingest-rate {args.ingest_rate:g} posts/s"
          + (f", {behind:,} records behind at the start)" if behind is not None else ")"))
    print(f"\n{api['cmd']}\n{ceiling['cmd']}\nworkers={args.workers} cpus={_cpus()} python={sys.version.split()[0]}")


def _cpus() -> int:
    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    main()
