"""Soak: the whole local stack under steady load, a speed worker killed now and then, checked at the end.

    .venv/bin/python bench/soak.py                                 # short: 3 minutes, 5,000 posts/s, one kill
    .venv/bin/python bench/soak.py --minutes 30                    # by hand: a kill every 5 minutes
    .venv/bin/python bench/soak.py --minutes 2 --posts-per-s 500   # as CI runs it (tests/integration/test_soak.py)

It starts its own stack (its own home under var/, ports from --base-port on, like the tests' stack), sends
backdated history (the closed hour before, and every kept minute: windows full from the start) so the
hourly job has a closed hour to publish through Airflow, then for
--minutes: posts with engagements at --posts-per-s, GETs across every read endpoint at --reads-per-s, a
kill -9 of one speed worker every --kill-every-s, and every process's resident memory sampled. After the
load: the speed layer catches up, Airflow publishes the closed hour, and the run passes when
- no process restarted except the killed workers (each replaced exactly once by its pool);
- no process's resident memory grew by more than 10% after the warm-up (5 minutes; in a shorter run a
  third, or until 45 s after the first kill), end against the warm-up's end (Redis: beyond its data's growth);
- no log line of the stack is an error, except those ALLOWED below (each with why);
- every read answered below 500;
- the held-back region's counts (HELD_BACK, a region checked tag by tag against the generator's own
  record) lie within the count-min bounds: estimate >= truth always, estimate <= truth + eps*N for at
  least 1 - delta of the tags;
- every closed hour the batch layer published equals the generator's truth exactly, every region.
The summary goes to --out (JSON) and the terminal; the exit status is 1 when a check failed. The home is
wiped at the start (only one a soak made), so no earlier run's data, log line or DAG run counts.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import os
import random
import re
import shutil
import signal
import statistics
import sys
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the checkout's packages first
    sys.path.insert(0, str(ROOT))

from speed_meters import busy_ticks, own_ticks, rss_kb, tree_ticks  # noqa: E402  (bench/ is on sys.path when this file runs as a script)

from adapters import kafka as kafka_io  # noqa: E402
from adapters import redis as redis_io  # noqa: E402
from trendcore.events import format_time  # noqa: E402
from trendcore.keys import KeySpace  # noqa: E402
from trendcore.settings import Settings  # noqa: E402
from trendcore.windows import HOUR_MS, minute_of  # noqa: E402
from trends.gen.model import REGIONS, GenConfig, Stream  # noqa: E402
from trends.gen.run import GenResult, produce  # noqa: E402
from trends.gen.truth import GroundTruth  # noqa: E402
from trends.gen.vocab import tag_for  # noqa: E402
from trends.stack import manager, procs  # noqa: E402

HELD_BACK = "KR"
"""The region whose counts are compared with the generator's truth tag by tag at the end (5% of the posts)."""
MAX_GROWTH = 0.10
"""Largest resident-memory growth allowed after the warm-up."""
SAMPLE_EVERY_S = 5.0
SHOWN_ERRORS = 5
SETTLE_S = 45.0
"""After a kill: the session timeout (10 s), two rebalances and the partitions' loads (7-11 s each on 2 busy
cores, measured 2026-12-03)."""
"""Unexpected error lines the summary prints (the JSON keeps 50)."""
LATE_MAX_S = 30
"""Live posts arrive at most this late: below the 1-minute grace, so a closed hour is complete when archived."""

ALLOWED: list[tuple[str, str, bool]] = [
    # (regular expression, why the line is expected, only while the stack stops)
    (r"speed-\d+ exited with -9; restarting", "the pool reports the worker this soak killed with kill -9", False),
    (r"kafka\.net\.transport.*Error receiving network data closing socket.*'NoneType' object has no attribute 'recv'",
     "kafka-python's network thread reads a socket its own close just dropped, when SIGTERM stops a worker", True),
    (r'"event":"Task failed with exception".*"exc_type":"(BrokenPipeError|AirflowTaskTerminated|EOFError)"|'
     r'"event":"Failed to report terminal task state to supervisor"|'
     r'(BrokenPipeError|Task received SIGTERM|received signal 15|"signal_name":"SIGTERM")',
     "a batch task still running when `trends down` stops Airflow loses its supervisor", True),
    (r"Workload execution failed\.|scheduler +\| Traceback \(most recent call last\)",
     "a task Airflow's LocalExecutor starts while `trends down` stops its API server cannot report its start "
     "(connection refused, with the traceback); the task runs again next time", True),
    (r"Exceptionally slow controller event \S+ took \d{4} ms\. "
     r"\(org\.apache\.kafka\.controller\.EventPerformanceMonitor\)",
     "Kafka's controller logs any event over 2 s (controller.performance.always.log.threshold.ms) at ERROR; on a "
     "saturated 2-core host its event loop can wait that long for a CPU. Up to 9,999 ms is a notice; 10 s or more "
     "fails the run (broker sessions time out near there)", False),
    (r"ERROR SparkContext: Error initializing SparkContext|java\.nio\.channels\.ClosedByInterruptException|"
     r"ERROR Utils: Uncaught exception in thread",
     "`trends down` stops a batch job's JVM while its SparkContext starts: the shutdown interrupts the start's "
     "I/O and Spark logs the interrupted start at ERROR; the job reruns next time", True),
    (r"spark-submit \w+ (--\S+ \S+ )*failed \(exit code (143|-15)\)",
     "`trends down` stops a batch job's spark-submit mid-run (SIGTERM: 128 + 15 through a shell, -15 direct); "
     "the job reruns next time", True),
]
"""Expected error lines: everything else an error by `is_error` fails the run. A line marked `only while the
stack stops` is expected only when stamped after the stop began (or unstamped, in a stopped process's log)."""
SPARK_LEVEL = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (\w+) ")
STAMP = re.compile(r'"ts": ?(\d{13})|"timestamp": ?"([^"]+)"|'
                   r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|\+00:00)?)")


def is_error(line: str) -> bool:
    """True when a log line reports an error, whatever the component's format: JSON lines (speed, Airflow task
    logs) by their level, Airflow's console by its level (a task's stderr by the level inside: Spark logs INFO
    there), log4j and Python by their level word, and any traceback or a pool restart."""
    if "Traceback (most recent call last)" in line or re.search(r"exited with -?\d+; restarting", line):
        return True
    if line.lstrip().startswith("{"):
        try:
            doc = json.loads(line)
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            level = str(doc.get("level", "")).upper()
            if doc.get("logger") == "task.stderr":
                return _stderr_error(str(doc.get("event", "")))
            return level in ("ERROR", "CRITICAL", "FATAL")
    console = re.search(r"\[(debug|info|warning|error|critical)\s*\]", line)
    if console:
        if line.rstrip().endswith("[task.stderr]"):
            inner = re.sub(r"^.*?\[error\s*\]\s*", "", line).rsplit("[task.stderr]", 1)[0]
            return _stderr_error(inner.strip())
        return console.group(1) in ("error", "critical")
    return bool(re.search(r"(^|[\s\[])(ERROR|FATAL|CRITICAL)([\]\s:]|$)", line))


def _stderr_error(text: str) -> bool:
    """A line a batch task wrote on stderr: Spark's own level when it has one, else a Python error's shape."""
    spark = SPARK_LEVEL.match(text)
    if spark:
        return spark.group(1) in ("ERROR", "FATAL")
    return bool(re.match(r"(\w+\.)*\w*(Error|Exception)\b|Traceback", text))


def stamp_ms(line: str) -> int | None:
    """The epoch ms a log line is stamped with, when it has a stamp we read."""
    found = STAMP.search(line)
    if not found:
        return None
    if found.group(1):
        return int(found.group(1))
    text = (found.group(2) or found.group(3)).replace(" ", "T")
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return int((when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp() * 1000)


@dataclass
class SoakConfig:
    """What one soak does; the defaults are the short setting CI runs, except the rate."""

    minutes: float = 3.0
    posts_per_s: float = 5000.0
    reads_per_s: float = 500.0
    kill_every_s: float | None = None
    warmup_s: float | None = None
    history_posts: int = 20_000
    base_port: int = 24100
    home: Path = ROOT / "var" / "soak"
    seed: int = 26
    settle_s: float = 420.0
    readers: int = 4

    def kill_times(self) -> list[float]:
        """Seconds into the load when a speed worker is killed: every --kill-every-s (5 minutes) while the
        rebalances a kill causes end SETTLE_S before the load does; one kill a third in for a run under 10
        minutes without --kill-every-s, so its memory is measured after that kill's rebalances."""
        seconds = self.minutes * 60
        if self.kill_every_s is None and seconds < 600:
            return [seconds / 3]
        every = self.kill_every_s or 300.0
        return [every * k for k in range(1, int(seconds // every) + 1) if every * k <= seconds - SETTLE_S]

    def warmup(self) -> float:
        """Seconds before memory counts: 5 minutes (a third of a shorter run), or until SETTLE_S after the first
        kill when that is later, so the rebalances the kill causes (the survivor loading the killed worker's
        partitions, then giving them back to its replacement: more or less resident memory, by design) are
        over before memory counts."""
        if self.warmup_s is not None:
            return self.warmup_s
        kills = self.kill_times()
        first = min(300.0, self.minutes * 60 / 3)
        return max(first, kills[0] + SETTLE_S) if kills else first


def soak_settings(cfg: SoakConfig, first_hour: int) -> Settings:
    """Every port from the base and every path in the soak's home (as tests/conftest.py's stack), plus the
    demo's batch timings: archive every minute, one minute of grace, so a closed hour turns exact within minutes.

    The DAGs start at `first_hour` (the history's hour), as a fresh deployment starts on its first day: the
    hourly job's first interval is that hour, and no daily job runs for a day before the stack had data."""
    start = datetime.fromtimestamp(first_hour * HOUR_MS / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    base, home = cfg.base_port, cfg.home
    with_jars = Settings()  # the jars scripts/bootstrap.sh resolved (TRENDS_STACK__JARS)
    return Settings(
        home=home,
        stack={"home": home, "jars": with_jars.stack.jars, "kafka_controller_port": base + 93,
               "kafka_sasl_port": None, "redis_tls_port": None},
        kafka={"bootstrap": f"127.0.0.1:{base + 92}", "partitions": 4},
        redis={"url": f"redis://127.0.0.1:{base + 79}/0"},
        spark={"master": "local[2]", "lake": home / "lake"},
        speed={"metrics_port": base + 8, "materializer_port": base + 7, "workers": 2},
        api={"port": base + 80},
        airflow={"home": home / "airflow", "port": base + 81, "archive_every_minutes": 1, "start_date": start},
        batch={"grace_minutes": 1},
    )


def airflow_ports(cfg: SoakConfig) -> dict[str, str]:
    """Airflow's log servers off their fixed default ports (8793/8794), so another stack's Airflow never clashes."""
    return {"AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(cfg.base_port + 82),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(cfg.base_port + 83)}


# ---------------------------------------------------------------- processes: who runs, restarts, memory


def cmdline(pid: int) -> str:
    """The command line of a process, or '' when it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def children(pid: int) -> list[int]:
    """Direct children of a process, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
    return found


def role_of(component: str, pid: int) -> str | None:
    """A long-lived child's role (speed-0, api-worker, airflow scheduler, ...); None for a transient one."""
    cmd = cmdline(pid)
    if component == "speed-workers":
        found = re.search(r"speed run --index (\d+)", cmd)
        return f"speed-{found.group(1)}" if found else None
    if component == "airflow":
        found = re.search(r"airflow (scheduler|api-server|dag-processor|triggerer)", cmd)
        return f"airflow {found.group(1)}" if found else None
    if component == "api":
        return "api worker" if cmd else None
    return None


def processes(settings: Settings) -> dict[str, int]:
    """Role -> PID of every long-lived process of the stack: each component and its lasting children."""
    found: dict[str, int] = {}
    for name, comp in manager.components(settings).items():
        pid = procs.read_pid(comp.service(settings))
        if pid is None or not procs.pid_alive(pid):
            continue
        found[name] = pid
        counts: Counter = Counter()
        for child in sorted(children(pid)):
            role = role_of(name, child)
            if role is not None:
                counts[role] += 1
                found[role if counts[role] == 1 else f"{role} {counts[role]}"] = child
    return found


@dataclass
class Sample:
    """One memory sample: seconds since the load started, role -> (pid, kB)."""

    at_s: float
    rss: dict[str, tuple[int, int]]
    redis_used_kb: int | None = None
    """Redis's own count of the memory it allocated (INFO used_memory): the data it was given to hold."""
    ticks: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Role -> (pid, CPU clock ticks it used so far)."""
    harness_ticks: int = 0
    """CPU ticks of this soak's own work so far (`own_work_ticks`): the load generator and the readers."""
    machine_ticks: int = 0
    """Busy CPU ticks of the whole machine so far."""


def cpu_cores(samples: list[Sample]) -> dict[str, float]:
    """Cores each role used on average between the first and the last sample (a role's PIDs summed: a killed
    worker and its replacements), the soak's own load generator and readers (`harness`), everything else that
    ran (`other`: the hourly Spark jobs and Airflow's task processes, the kernel) and the machine (`machine`)."""
    if len(samples) < 2:
        return {}
    span = (samples[-1].at_s - samples[0].at_s) * os.sysconf("SC_CLK_TCK")
    used: Counter = Counter()
    for role in {r for s in samples for r in s.ticks}:
        by_pid: dict[int, list[int]] = {}
        for s in samples:
            if role in s.ticks:
                by_pid.setdefault(s.ticks[role][0], []).append(s.ticks[role][1])
        used[role] = sum(t[-1] - t[0] for t in by_pid.values())
    used["harness"] = samples[-1].harness_ticks - samples[0].harness_ticks
    machine = samples[-1].machine_ticks - samples[0].machine_ticks
    used["other"] = max(0, machine - sum(used.values()))
    used["machine"] = machine
    return {role: round(ticks / span, 2) for role, ticks in sorted(used.items(), key=lambda kv: -kv[1])}


def growth(samples: list[Sample], warmup_s: float) -> dict[str, dict]:
    """Per role: kB at the warm-up's end and at the end (medians of 3 samples), growth, and peak; a role whose
    PID changed during the run (a killed worker's replacement) gets a warm-up of its own from its start."""
    out: dict[str, dict] = {}
    roles = {role for s in samples for role in s.rss}
    for role in sorted(roles):
        series = [(s.at_s, *s.rss[role]) for s in samples if role in s.rss]
        last_pid = series[-1][1]
        own = [(at, kb) for at, pid, kb in series if pid == last_pid]
        after = [(at, kb) for at, kb in own if at >= warmup_s]
        restarted = own[0][0] > samples[0].at_s + SAMPLE_EVERY_S
        if restarted:  # a replacement (a killed worker's): measured after a warm-up of its own
            after = [(at, kb) for at, kb in own if at >= own[0][0] + warmup_s]
        if len(after) < 6:
            out[role] = {"pid": last_pid, "measured": False, "restarted": restarted,
                         "note": "too few samples after its warm-up"}
            continue
        start = statistics.median(kb for _, kb in after[:3])
        end = statistics.median(kb for _, kb in after[-3:])
        out[role] = {"pid": last_pid, "measured": True, "restarted": restarted, "start_kb": int(start),
                     "end_kb": int(end), "peak_kb": max(kb for _, kb in after),
                     "growth": round(end / start - 1, 4) if start else 0.0}
        if role == "redis":
            out[role].update(beyond_data(samples, warmup_s, start))
    return out


def beyond_data(samples: list[Sample], warmup_s: float, rss_start: float) -> dict:
    """Redis holds more data as the stream goes on (post ids kept for deduplication, newest posts, one sketch a
    minute until the windows are full), by design and within maxmemory: its RSS growth beyond the growth of
    used_memory (what a leak or fragmentation would add), as a share of its RSS at the warm-up's end."""
    used = [(s.at_s, s.redis_used_kb) for s in samples if s.at_s >= warmup_s and s.redis_used_kb is not None]
    if len(used) < 6:
        return {"data_growth_kb": None, "growth_beyond_data": None}
    data = statistics.median(kb for _, kb in used[-3:]) - statistics.median(kb for _, kb in used[:3])
    rss = [s.rss["redis"][1] for s in samples if s.at_s >= warmup_s and "redis" in s.rss]
    beyond = statistics.median(rss[-3:]) - statistics.median(rss[:3]) - data
    return {"data_growth_kb": int(data), "growth_beyond_data": round(beyond / rss_start, 4)}


def memory_ok(memory: dict[str, dict]) -> bool:
    """Every measured process grew by at most MAX_GROWTH; Redis by at most that beyond its data's growth."""
    for role, m in memory.items():
        if not m["measured"]:
            continue
        grew = m.get("growth_beyond_data") if role == "redis" else m["growth"]
        if grew is None or grew > MAX_GROWTH:
            return False
    return True


# ---------------------------------------------------------------- the load: reads and kills


READ_TAGS = ["WorldCup", "news", "music", "Café", "AI", "ViralMoment", *(tag_for(i) for i in range(20, 40))]


def read_paths(now_ms: int, rng: random.Random) -> list[str]:
    """One round of GETs across every read endpoint: trending, counts (windows, ranges, regions), top and newest
    posts, series, health, readiness, metrics, regions and the dashboard."""
    tag = urllib.parse.quote(rng.choice(READ_TAGS))
    region = rng.choice(("all", *REGIONS))
    hour = now_ms // HOUR_MS * HOUR_MS
    span = f"from={format_time(hour - HOUR_MS)[:16]}Z&to={format_time(hour + HOUR_MS)[:16]}Z"
    return [
        f"/trending?window=1h&region={region}&k=10&rank=volume",
        f"/trending?window=24h&region={region}&k=10&rank=rise",
        f"/tags/{tag}/count?window=1h&region={region}",
        f"/tags/{tag}/count?window=24h",
        f"/tags/{tag}/count?region={region}&{span}",
        f"/tags/{tag}/posts?k=5",
        f"/tags/{tag}/posts?k=5&sort=recent",
        f"/tags/{tag}/series?window=1h&step=5m&region={region}",
        f"/tags/{tag}/series?window=24h&step=1h",
        "/healthz", "/readyz", "/metrics", "/regions", "/",
    ]


@dataclass
class Reads:
    """What the readers saw: answers per status, per endpoint, latencies (ms), and failures (5xx, no answer)."""

    statuses: Counter = field(default_factory=Counter)
    endpoints: Counter = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, path: str, status: int, ms: float) -> None:
        """Count one answer (status 0: no answer); keep the first 20 failures' paths."""
        with self.lock:
            self.statuses[status] += 1
            route = path.split("?")[0]
            self.endpoints[route.rsplit("/", 1)[-1] if route.startswith("/tags/") else route] += 1
            self.latencies_ms.append(ms)
            if (status >= 500 or status == 0) and len(self.failures) < 20:
                self.failures.append(f"{status} {path}")

    def summary(self, seconds: float) -> dict:
        """Totals, rate, percentiles and the failures."""
        lat = sorted(self.latencies_ms)
        pick = (lambda q: round(lat[min(len(lat) - 1, int(q * len(lat)))], 2)) if lat else (lambda q: None)
        total = sum(self.statuses.values())
        return {"reads": total, "per_s": round(total / seconds, 1) if seconds else 0.0,
                "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
                "endpoints": dict(self.endpoints), "p50_ms": pick(0.50), "p99_ms": pick(0.99),
                "max_ms": round(lat[-1], 2) if lat else None, "failures": self.failures,
                "failed": sum(v for k, v in self.statuses.items() if k >= 500 or k == 0)}


def reader(host: str, port: int, rate: float, stop, reads: Reads, seed: int) -> None:
    """GET the read paths round-robin at `rate` per second over one kept-alive connection; 5xx are failures."""
    rng = random.Random(seed)
    conn = http.client.HTTPConnection(host, port, timeout=10)
    started, sent, queue = time.monotonic(), 0, []
    while not stop.is_set():
        if not queue:
            queue = read_paths(int(time.time() * 1000), rng)
        path = queue.pop()
        begun = time.perf_counter()
        try:
            conn.request("GET", path)
            answer = conn.getresponse()
            answer.read()
            status = answer.status
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = http.client.HTTPConnection(host, port, timeout=10)
            status = 0
        reads.record(path, status, (time.perf_counter() - begun) * 1000)
        sent += 1
        ahead = sent / rate - (time.monotonic() - started)
        if ahead > 0:
            stop.wait(ahead)
    conn.close()


def read_process(host: str, port: int, rate: float, threads: int, seed: int, stop, done, count) -> None:
    """A process of readers (`threads` of them sharing `rate`), apart from the generator's GIL: when `stop` is
    set, what they saw goes into the `done` queue; `count` is a shared tally for the progress bar."""
    reads, began = Reads(), time.monotonic()
    pool = [threading.Thread(target=reader, args=(host, port, rate / threads, stop, reads, seed * 100 + i))
            for i in range(threads)]
    for thread in pool:
        thread.start()
    while not stop.wait(1.0):
        count.value = sum(reads.statuses.values())
    for thread in pool:
        thread.join()
    done.put({"statuses": dict(reads.statuses), "endpoints": dict(reads.endpoints), "latencies_ms": reads.latencies_ms,
              "failures": reads.failures, "seconds": time.monotonic() - began})


@dataclass
class Readers:
    """The reading processes of a soak, and how to gather what they saw."""

    processes: list
    stop: object
    done: object
    counts: list

    @classmethod
    def start(cls, settings: Settings, rate: float, processes: int = 2, threads: int = 4) -> Readers:
        """`processes` spawned processes of `threads` readers each, `rate` GETs per second in all."""
        ctx = multiprocessing.get_context("spawn")  # no fork of a process with librdkafka's threads
        stop, done = ctx.Event(), ctx.Queue()
        counts = [ctx.Value("q", 0, lock=False) for _ in range(processes)]
        procs_ = [ctx.Process(target=read_process, args=(settings.api.host, settings.api.port, rate / processes,
                                                          threads, n, stop, done, counts[n]), daemon=True)
                  for n in range(processes)]
        for proc in procs_:
            proc.start()
        return cls(procs_, stop, done, counts)

    def so_far(self) -> int:
        """Reads answered so far (for the progress bar, a second behind)."""
        return sum(c.value for c in self.counts)

    def finish(self) -> tuple[Reads, float]:
        """Stop the readers; what they saw, merged, and the seconds they read for (the longest process's)."""
        self.stop.set()
        reads, seconds = Reads(), 0.0
        for _ in self.processes:
            part = self.done.get(timeout=120)
            seconds = max(seconds, part["seconds"])
            reads.statuses.update({int(k): v for k, v in part["statuses"].items()})
            reads.endpoints.update(part["endpoints"])
            reads.latencies_ms += part["latencies_ms"]
            reads.failures += part["failures"][: 20 - len(reads.failures)]
        for proc in self.processes:
            proc.join(timeout=30)
        return reads, seconds


def worker_pids(settings: Settings) -> dict[int, int]:
    """Index -> PID of the pool's speed workers now."""
    pool = procs.read_pid(manager.components(settings)["speed-workers"].service(settings))
    found = {}
    for child in children(pool) if pool else []:
        match = re.search(r"speed run --index (\d+)", cmdline(child))
        if match:
            found[int(match.group(1))] = child
    return found


def killer(settings: Settings, times: list[float], stop: threading.Event, kills: list[dict], began: float) -> None:
    """kill -9 one speed worker at each of `times` (seconds after `began`), taking turns."""
    turn = 0
    for at in times:
        if stop.wait(max(0.0, at - (time.monotonic() - began))):
            return
        workers = worker_pids(settings)
        if not workers:
            continue
        index = sorted(workers)[turn % len(workers)]
        os.kill(workers[index], signal.SIGKILL)
        kills.append({"at_s": round(time.monotonic() - began, 1), "worker": f"speed-{index}", "pid": workers[index]})
        turn += 1


def sample(settings: Settings, began: float) -> Sample:
    """Each long-lived process's resident memory now, and Redis's used_memory."""
    running = processes(settings)
    rss = {role: (pid, kb) for role, pid in running.items() if (kb := rss_kb(pid)) is not None}
    ticks = {role: (pid, t) for role, pid in running.items() if (t := own_ticks(pid)) is not None}
    client = redis_io.client(settings.redis)
    try:
        used = int(client.info("memory")["used_memory"]) // 1024
    except Exception:  # noqa: BLE001 - a sample without it; the memory check says so
        used = None
    finally:
        client.close()
    return Sample(round(time.monotonic() - began, 1), rss, used, ticks, own_work_ticks(set(running.values())),
                  busy_ticks())


def own_work_ticks(stack: set[int]) -> int:
    """CPU ticks of this soak's own work so far: its process (the load generator, the killer, the sampler) and
    its children that are not the stack's (the readers); the stack's services are its children too, counted as
    their roles."""
    me = os.getpid()
    return (own_ticks(me) or 0) + tree_ticks([child for child in children(me) if child not in stack])


def sampler(settings: Settings, stop: threading.Event, samples: list[Sample], began: float) -> None:
    """Every SAMPLE_EVERY_S, a sample."""
    while True:
        samples.append(sample(settings, began))
        if stop.wait(SAMPLE_EVERY_S):
            return


# ---------------------------------------------------------------- the end: catch up, publish, compare


def caught_up(settings: Settings, timeout_s: float) -> float | None:
    """Wait until every offset Kafka holds is in the answers (merged by the materializer's merger); seconds it
    took, None on timeout."""
    k, keys = settings.kafka, KeySpace.of(settings)
    ends = {(t, p): o for t in (k.posts_topic, k.engagements_topic) for p, o in kafka_io.end_offsets(k, t).items()}
    names = [keys.part_merged(p, t) for t, p in ends]
    client = redis_io.client(settings.redis)
    began = time.monotonic()
    try:
        while time.monotonic() - began < timeout_s:
            if [int(v or 0) for v in redis_io.mget(client, names)] == list(ends.values()):
                return round(time.monotonic() - began, 1)
            time.sleep(0.5)
        return None
    finally:
        client.close()


def published_hours(settings: Settings, hours: list[int]) -> list[int]:
    """Those of `hours` whose worldwide exact view the batch layer published."""
    client, keys = redis_io.client(settings.redis), KeySpace.of(settings)
    try:
        return [h for h in hours if client.exists(keys.exact_meta("all", "h", h))]
    finally:
        client.close()


def wait_published(settings: Settings, hour: int, timeout_s: float) -> float | None:
    """Wait until the hourly job published `hour` through Airflow; seconds it took, None on timeout."""
    began = time.monotonic()
    while time.monotonic() - began < timeout_s:
        if published_hours(settings, [hour]):
            return round(time.monotonic() - began, 1)
        time.sleep(5)
    return None


def hour_truth(truth: GroundTruth, hour: int, region: str) -> Counter:
    """The generator's exact mentions per tag in one hour and region."""
    return truth.counts(region, range(minute_of(hour * HOUR_MS), minute_of((hour + 1) * HOUR_MS)))


def closed_hours(settings: Settings, truth: GroundTruth, hours: list[int]) -> dict:
    """Every published hour against the generator, every region and worldwide: equal, tag for tag."""
    client, keys = redis_io.client(settings.redis), KeySpace.of(settings)
    checked, mismatches = [], []
    try:
        for hour in published_hours(settings, hours):
            for region in ("all", *REGIONS):
                got = {k.decode(): int(v) for k, v in client.hgetall(keys.exact_hour(region, hour)).items()}
                want = dict(hour_truth(truth, hour, region))
                if got != want:
                    wrong = sorted(set(got) ^ set(want) | {t for t in got.keys() & want.keys() if got[t] != want[t]})
                    mismatches.append({"hour": format_time(hour * HOUR_MS), "region": region,
                                       "tags_differing": len(wrong), "example": wrong[:3],
                                       "published_total": sum(got.values()), "truth_total": sum(want.values())})
            mentions = sum(hour_truth(truth, hour, "all").values())
            checked.append({"hour": format_time(hour * HOUR_MS), "mentions": mentions})
    finally:
        client.close()
    return {"hours": checked, "mismatches": mismatches}


def api_get(settings: Settings, path: str) -> dict:
    """GET a JSON answer of the stack's API."""
    conn = http.client.HTTPConnection(settings.api.host, settings.api.port, timeout=30)
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        body = answer.read()
        if answer.status != 200:
            raise RuntimeError(f"GET {path}: {answer.status} {body[:200]!r}")
        return json.loads(body)
    finally:
        conn.close()


def held_back(settings: Settings, truth: GroundTruth, first_hour: int, tags: int = 60) -> dict:
    """The held-back region through the API, [first hour, end of the current hour): for its `tags` most
    mentioned tags and as many drawn at random, the estimate is never below the truth and within eps * N
    (count-min bounds) for at least 1 - delta of them; closed hours published exactly must match exactly."""
    minutes = range(minute_of(first_hour * HOUR_MS), minute_of(int(time.time() * 1000)) + 60)
    counts = truth.counts(HELD_BACK, minutes)
    top = [t for t, _ in counts.most_common(tags)]
    rest = sorted(set(counts) - set(top))
    picked = top + random.Random(7).sample(rest, min(tags, len(rest)))
    last = int(time.time() * 1000) // HOUR_MS + 1
    span = f"from={format_time(first_hour * HOUR_MS)[:16]}Z&to={format_time(last * HOUR_MS)[:16]}Z"
    below, beyond, worst, rows, beyond_tags = [], 0, 0, 0, []
    worldwide = truth.counts("all", minutes)
    eps = settings.sketch.eps
    for tag in picked:
        doc = api_get(settings, f"/tags/{urllib.parse.quote(tag)}/count?region={HELD_BACK}&{span}")
        true = counts[tag]
        rows += 1
        if doc["count"] < true:
            below.append({"tag": tag, "truth": true, "count": doc["count"], "source": doc["source"]})
        if doc["lower_bound"] > true:  # estimate - eps*N above the truth: beyond the count-min bound
            beyond += 1
            if len(beyond_tags) < 20:
                beyond_tags.append({"tag": tag, "truth": true, "count": doc["count"], "lower": doc["lower_bound"],
                                    "source": doc["source"], "worldwide_truth": worldwide[tag]})
        worst = max(worst, doc["count"] - true)
    delta = settings.sketch.delta
    return {"region": HELD_BACK, "tags": rows, "posts": None, "below_truth": below, "beyond_eps_n": beyond,
            "beyond": beyond_tags,
            "allowed_beyond": int(delta * rows), "max_overcount": worst, "eps": eps, "delta": delta,
            "passed": not below and beyond <= int(delta * rows)}


def log_files(settings: Settings) -> list[Path]:
    """The stack's logs: each component's, and Airflow's task logs (archive, hourly)."""
    files = sorted((settings.stack.home / "run").glob("*.log"))
    return files + sorted((settings.airflow.home / "logs").rglob("*.log"))


def error_lines(settings: Settings, stopping_ms: int) -> dict:
    """Error lines of every log (is_error), split into the expected (ALLOWED, counted per reason) and the rest
    (the first 50 kept); `stopping_ms` is when the stack began to stop."""
    allowed: Counter = Counter()
    unexpected: list[str] = []
    for path in log_files(settings):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if not is_error(line):
                continue
            why = expected(line, stopping_ms)
            if why:
                allowed[why] += 1
            else:
                unexpected.append(f"{path.relative_to(settings.stack.home)}: {line[:400]}")
    return {"allowed": dict(allowed), "unexpected": unexpected[:50], "unexpected_count": len(unexpected)}


def expected(line: str, stopping_ms: int) -> str | None:
    """Why an error line is expected (its ALLOWED reason), None when it is not."""
    for pattern, why, only_stopping in ALLOWED:
        if re.search(pattern, line):
            when = stamp_ms(line)
            if not only_stopping or when is None or when >= stopping_ms:
                return why
    return None


# ---------------------------------------------------------------- the run


@dataclass
class Outcome:
    """Everything a soak measured, and whether each check passed."""

    config: dict
    started: str = ""
    produced: dict = field(default_factory=dict)
    reads: dict = field(default_factory=dict)
    kills: list = field(default_factory=list)
    restarts: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    rss_series: dict = field(default_factory=dict)
    """Role -> [[seconds into the load, kB], ...]: every sample, to see when a process grew."""
    cpu: dict = field(default_factory=dict)
    """Role -> cores it used over the load (`cpu_cores`): where the machine's CPU went."""
    errors: dict = field(default_factory=dict)
    held_back: dict = field(default_factory=dict)
    closed_hours: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    checks: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(self.checks.values())


def restarts(before: dict[str, int], after: dict[str, int], kills: list[dict]) -> dict:
    """Processes whose PID changed or vanished, apart from the killed workers (each must be replaced)."""
    killed = {k["worker"] for k in kills}
    changed = {role: {"before": pid, "after": after.get(role)} for role, pid in before.items()
               if after.get(role) != pid and role not in killed}
    new = sorted(set(after) - set(before))
    replaced = {role: after.get(role) not in (None, before.get(role)) for role in killed}
    last_pids = {k["worker"]: k["pid"] for k in kills}
    unreplaced = sorted(r for r in killed if after.get(r) in (None, last_pids[r]))
    return {"unexpected": changed, "new": new, "killed_replaced": replaced, "unreplaced": unreplaced}


def send_history(settings: Settings, cfg: SoakConfig, hour: int, log: Callable[[str], None]) -> Stream:
    """Backdated posts (late at most LATE_MAX_S) at `history_posts` an hour, from the start of the closed `hour`
    or the start of the speed layer's kept minutes if earlier, up to now: the hourly job has an hour to publish,
    and every window and kept bucket holds data before the load starts, so memory measured after the warm-up
    is what the processes keep for a full window, not the windows filling (a fresh stack's 1-hour window fills
    for an hour, its kept minutes for two)."""
    now = int(time.time() * 1000)
    start = min(hour * HOUR_MS, minute_of(now) * 60_000 - settings.speed.keep_minutes * 60_000)
    rate = cfg.history_posts / 3600
    count = int(rate * (now - start) / 1000)
    stream = Stream(GenConfig(seed=cfg.seed, start_ms=start, event_rate=rate, wall_now_ms=now,
                              late_min_s=1, late_max_s=LATE_MAX_S, spike_at_s=10**9))
    produce(stream, settings, count=count)
    log(f"history: {count:,} posts from {format_time(start)[:16]}Z sent")
    return stream


MARKER = ".soak-home"
"""A file in the soak's home saying a soak made it: only such a home is wiped before the next run."""


def fresh_home(settings: Settings) -> None:
    """Stop what an earlier soak left running there, then wipe the home (logs, Kafka, Redis, lake, Airflow's
    database): each soak starts from nothing, so no earlier run's log line or DAG run counts. A home that a soak
    did not make (no MARKER) is refused, never wiped."""
    home = settings.stack.home
    if home.exists() and any(home.iterdir()):
        if not (home / MARKER).exists():
            raise SystemExit(f"{home} is not empty and no soak made it ({MARKER} missing): choose another --home")
        manager.down(settings, log=lambda _m: None)
        shutil.rmtree(home)
    home.mkdir(parents=True, exist_ok=True)
    (home / MARKER).write_text("made by bench/soak.py; wiped at the start of the next soak\n")


def run(cfg: SoakConfig, log: Callable[[str], None] = print, progress: bool = True) -> Outcome:
    """Start the stack, load it for cfg.minutes, check, stop it; the outcome whatever happened."""
    first_hour = int(time.time() * 1000) // HOUR_MS - 1
    settings = soak_settings(cfg, first_hour)
    fresh_home(settings)
    os.environ.update(airflow_ports(cfg))
    outcome = Outcome(config={k: str(v) for k, v in asdict(cfg).items()}, started=format_time(int(time.time() * 1000)))
    t0 = time.monotonic()
    try:
        first = [name for name in manager.components(settings) if name != "airflow"]
        manager.up(settings, names=first, log=log)
        history = send_history(settings, cfg, first_hour, log)
        manager.up(settings, names=["airflow"], log=log)
        outcome.timings["stack_up_s"] = round(time.monotonic() - t0, 1)
        load(settings, cfg, outcome, history, first_hour, log, progress)
    finally:
        t_down, stopping_ms = time.monotonic(), int(time.time() * 1000)
        manager.down(settings, log=lambda _m: None)
        outcome.timings["down_s"] = round(time.monotonic() - t_down, 1)
        outcome.timings["total_s"] = round(time.monotonic() - t0, 1)
    if outcome.checks:  # the logs are complete once every process stopped
        outcome.errors = error_lines(settings, stopping_ms)
        outcome.checks["no_unexpected_error_lines"] = outcome.errors["unexpected_count"] == 0
    return outcome


def load(settings: Settings, cfg: SoakConfig, outcome: Outcome, history: Stream, first_hour: int,
         log: Callable[[str], None], progress: bool) -> None:
    """The load phase and the checks after it, filling `outcome`."""
    before = processes(settings)
    began = time.monotonic()
    seconds = cfg.minutes * 60
    live = Stream(GenConfig(seed=cfg.seed + 1, start_ms=int(time.time() * 1000), event_rate=cfg.posts_per_s,
                            wall_now_ms=int(time.time() * 1000), late_min_s=1, late_max_s=LATE_MAX_S,
                            spike_at_s=60.0, spike_ramp_s=120.0))
    stop, produced = threading.Event(), {}
    kills, samples = [], []
    threads = [threading.Thread(target=lambda: produced.update(
        result=produce(live, settings, duration_s=seconds, rate=cfg.posts_per_s)), name="producer")]
    threads += [threading.Thread(target=killer, args=(settings, cfg.kill_times(), stop, kills, began),
                                 name="killer"),
                threading.Thread(target=sampler, args=(settings, stop, samples, began), name="sampler")]
    for thread in threads:
        thread.daemon = True
        thread.start()
    readers = Readers.start(settings, cfg.reads_per_s, threads=cfg.readers)
    wait_load(seconds, began, live, readers, kills, progress)
    reads, read_s = readers.finish()
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    load_s = time.monotonic() - began
    result: GenResult | None = produced.get("result")
    outcome.produced = {"posts": result.posts if result else None, "records": result.records if result else None,
                        "seconds": round(result.seconds, 1) if result else None,
                        "posts_per_s": round(result.posts_per_s, 1) if result else None,
                        "asked_posts_per_s": cfg.posts_per_s, "history_posts": history.truth.posts,
                        "held_back_posts": _region_posts(history.truth, live.truth)}
    outcome.reads = reads.summary(read_s)
    outcome.kills = kills
    outcome.timings["load_s"] = round(load_s, 1)
    log(f"load done: {outcome.produced['posts_per_s']} posts/s, {outcome.reads['per_s']} reads/s, {len(kills)} kills")
    outcome.timings["catch_up_s"] = caught_up(settings, cfg.settle_s)
    outcome.timings["hour_published_s"] = wait_published(settings, first_hour, cfg.settle_s)
    after = processes(settings)
    truth = merged(history.truth, live.truth)
    now_hour = int(time.time() * 1000) // HOUR_MS
    outcome.restarts = restarts(before, after, kills)
    outcome.memory = growth([s for s in samples if s.at_s <= load_s + 1], cfg.warmup())
    outcome.cpu = cpu_cores([s for s in samples if s.at_s <= load_s + 1])
    outcome.rss_series = {role: [[round(s.at_s, 1), s.rss[role][1]] for s in samples if role in s.rss]
                          for role in sorted({r for s in samples for r in s.rss})}
    outcome.held_back = held_back(settings, truth, first_hour)
    outcome.held_back["posts"] = outcome.produced["held_back_posts"]
    outcome.closed_hours = closed_hours(settings, truth, list(range(first_hour, now_hour)))
    outcome.checks = checks(outcome, first_hour)


def _region_posts(*truths: GroundTruth) -> int:
    """Mentions the held-back region got (for the summary's scale)."""
    return sum(n for t in truths for (_, region, _), n in t.mentions.items() if region == HELD_BACK)


def merged(*truths: GroundTruth) -> GroundTruth:
    """One truth of several streams: their mention counts added."""
    total = GroundTruth()
    for truth in truths:
        total.mentions.update(truth.mentions)
    return total


def checks(outcome: Outcome, first_hour: int) -> dict[str, bool]:
    """Each pass condition of the soak, by name."""
    memory = outcome.memory
    hour = format_time(first_hour * HOUR_MS)
    return {
        "no_unexpected_restarts": not outcome.restarts["unexpected"] and not outcome.restarts["new"]
        and not outcome.restarts["unreplaced"],
        "every_kill_done": len(outcome.kills) >= 1,
        "memory_growth_at_most_10pct": memory_ok(memory),
        "no_5xx_reads": outcome.reads["failed"] == 0 and outcome.reads["reads"] > 0,
        "speed_caught_up": outcome.timings.get("catch_up_s") is not None,
        "held_back_region_within_bounds": outcome.held_back["passed"],
        "closed_hour_published": any(h["hour"] == hour for h in outcome.closed_hours["hours"]),
        "closed_hours_exact": not outcome.closed_hours["mismatches"],
    }


def wait_load(seconds: float, began: float, live: Stream, readers: Readers, kills: list, progress: bool) -> None:
    """Sleep through the load phase, with a live progress bar when asked."""
    if not progress:
        time.sleep(max(0.0, seconds - (time.monotonic() - began)))
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True)) as bar:
        task = bar.add_task("soak", total=seconds)
        while (elapsed := time.monotonic() - began) < seconds:
            total = readers.so_far()
            bar.update(task, completed=elapsed, description=(
                f"soak: {live.truth.posts / elapsed:,.0f} posts/s, {total / elapsed:,.0f} reads/s, "
                f"{len(kills)} kills"))
            time.sleep(1.0)


def markdown(outcome: Outcome) -> str:
    """The figures as docs/benchmarks.md rows would quote them."""
    p, r = outcome.produced, outcome.reads
    mem = ", ".join(f"{role} {m['growth']:+.1%}" for role, m in outcome.memory.items() if m["measured"])
    redis = outcome.memory.get("redis", {})
    if redis.get("growth_beyond_data") is not None:
        mem += f" (redis beyond its data: {redis['growth_beyond_data']:+.1%}, data +{redis['data_growth_kb']:,} kB)"
    kills = ", ".join(f"{k['worker']} at {k['at_s']} s" for k in outcome.kills)
    lines = [
        f"- load: {p['posts_per_s']} posts/s asked {p['asked_posts_per_s']:g} ({p['posts']:,} posts, "
        f"{p['records']:,} records in {p['seconds']} s); reads {r['per_s']}/s ({r['reads']:,}, statuses "
        f"{r['statuses']}, p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms)",
        f"- kills: {len(outcome.kills)} ({kills}); "
        f"restarts beyond them: {outcome.restarts['unexpected'] or 'none'}, new: {outcome.restarts['new'] or 'none'}",
        f"- memory growth after the warm-up: {mem}",
        f"- CPU over the load, cores: {', '.join(f'{role} {cores}' for role, cores in outcome.cpu.items())}",
        f"- error lines: {outcome.errors['unexpected_count']} unexpected; expected: {outcome.errors['allowed']}",
        *(f"  - {line[:300]}" for line in outcome.errors.get("unexpected", [])[:SHOWN_ERRORS]),
        f"- held-back region {outcome.held_back['region']}: {outcome.held_back['tags']} tags, "
        f"{len(outcome.held_back['below_truth'])} below the truth, {outcome.held_back['beyond_eps_n']} beyond eps*N "
        f"(allowed {outcome.held_back['allowed_beyond']}), largest overcount {outcome.held_back['max_overcount']}",
        f"- closed hours: {outcome.closed_hours['hours']} published, "
        f"mismatches {outcome.closed_hours['mismatches'] or 'none'}",
        f"- timings: {outcome.timings}",
        f"- checks: {outcome.checks} -> {'PASS' if outcome.passed else 'FAIL'}",
    ]
    return "\n".join(lines)


app = typer.Typer(add_completion=False)


@app.command()
def main(
    minutes: Annotated[float, typer.Option(help="Minutes of load (3: the short setting CI runs; 30 by hand).")] = 3.0,
    posts_per_s: Annotated[float, typer.Option(help="Posts per second, each with 2 engagements on average.")] = 5000.0,
    reads_per_s: Annotated[float, typer.Option(help="GETs per second across every read endpoint.")] = 500.0,
    kill_every_s: Annotated[Optional[float], typer.Option(
        help="Seconds between kill -9s of a speed worker (default: 300; under 10 minutes: one, a third in).")] = None,
    warmup_s: Annotated[Optional[float], typer.Option(
        help="Seconds before memory growth counts (default: 300, or a third of a shorter run).")] = None,
    history_posts: Annotated[int, typer.Option(help="Posts an hour of the backdated history.")] = 20_000,
    base_port: Annotated[int, typer.Option(help="Ports base+7 .. base+94, as the tests' stack.")] = 24100,
    home: Annotated[Path, typer.Option(help="The soak stack's home (logs, lake, Airflow).")] = ROOT / "var" / "soak",
    settle_s: Annotated[float, typer.Option(
        help="Longest wait after the load for catch-up and the hourly job.")] = 420.0,
    out: Annotated[Path, typer.Option(help="Where the JSON summary goes.")] = ROOT / "var" / "soak-summary.json",
) -> None:
    """Soak the local stack: steady posts and reads, periodic worker kills; pass or fail on the checks."""
    cfg = SoakConfig(minutes=minutes, posts_per_s=posts_per_s, reads_per_s=reads_per_s, kill_every_s=kill_every_s,
                     warmup_s=warmup_s, history_posts=history_posts, base_port=base_port, home=home, settle_s=settle_s)
    console = Console(stderr=True)
    outcome = run(cfg, log=lambda m: console.print(m, markup=False, highlight=False))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**asdict(outcome), "passed": outcome.passed}, indent=2, default=str) + "\n")
    print(markdown(outcome) if outcome.checks else f"no checks ran: {outcome.timings}")
    raise typer.Exit(0 if outcome.passed else 1)


if __name__ == "__main__":
    app()
