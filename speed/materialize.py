"""The materializer: every few seconds, per region and 'all', per window (1h, 24h), re-score the
union of the buckets' candidates with the sketches and write the volume and rise snapshots."""

from __future__ import annotations

import logging
import math
import signal
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np
import orjson

from adapters import redis as redis_io
from adapters.redis import redis_errors
from speed import metrics
from speed.cells import CellCache
from speed.logs import event
from speed.merge import merge_authors
from speed.merger import Merger
from speed.ranking import Rules, Scored, by_rise, by_volume, previous_ranks, shortlist, snapshot
from speed.sketch_cache import BucketCache, counters, sum_of_minima
from trendcore.cms import error_bound
from trendcore.errors import ServiceError
from trendcore.keys import KeySpace
from trendcore.regions import ISO_3166_ALPHA2, WORLDWIDE
from trendcore.settings import Settings
from trendcore.snapshot import Rebuilding, Snapshot
from trendcore.windows import hour_of, hour_of_week, source_of, unit_ms, window_buckets

log = logging.getLogger("speed.materializer")
_PER_BUCKET = 150  # candidates read per bucket before the union (they are sorted by estimate)


def next_round_at(started_s: float, every_s: float, lag_s: float) -> float:
    """When the round after one started at `started_s` (epoch seconds) starts: the tick after that round's on the
    schedule k * every_s + lag_s. A round counts as the tick's it started in the last quarter period before or the
    three quarters after (a sleep wakes a little late, at times early; the first round, or one after an overrun,
    starts at any phase), so rounds start between a quarter and one and a quarter periods apart."""
    return (math.floor((started_s - lag_s) / every_s + 0.25) + 1) * every_s + lag_s


@dataclass
class Window:
    """The buckets of one region's window, read once: sketch counters (None: empty), exact flags, totals."""

    region: str
    name: str
    unit: str
    buckets: list[int]
    sketches: list[np.ndarray | None]
    exact: dict[int, bool]
    total: int
    approx_total: int
    totals: list[int]

    @property
    def source(self) -> str:
        """exact, mixed or approx: each bucket is exact when the batch layer published it."""
        return source_of("exact" if self.exact.get(b, False) else "approx" for b in self.buckets)


class Materializer:
    def __init__(self, settings: Settings) -> None:
        self.settings, self.speed = settings, settings.speed
        self.client = redis_io.client(settings.redis)
        self.keys = KeySpace.of(settings)
        self.shape, self.eps = settings.sketch.shape, settings.sketch.eps
        self.rules = Rules(self.speed.top_k, self.speed.min_authors, self.speed.rise_min_count,
                           self.speed.rise_a, self.speed.rise_b)
        self.cells = CellCache(self.shape)
        self.sketches: BucketCache[np.ndarray] = BucketCache(self.speed.materializer_cache_sketches)
        self.top: BucketCache[list[tuple[str, float]]] = BucketCache(self.speed.materializer_cache_sketches)
        self._regions: tuple[int, list[str]] | None = None
        self._display_cache: dict[str, str] = {}
        self.stopping = False
        self.last_written: float | None = None
        self.merger = Merger(self.client, self.keys, settings)  # run before each round: what readers see

    def run(self) -> None:
        """Write snapshots every materialize_every_s until SIGTERM."""
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        event(log, "started", every_s=self.speed.materialize_every_s)
        while not self.stopping:
            started = time.time()
            try:
                self.write_all()
            except ServiceError as exc:  # the adapter's wrapping of every Redis failure
                event(log, "service_error", level=logging.ERROR, error=str(exc))
            except Exception as exc:  # keep serving the last snapshots, say why
                event(log, "materialize_failed", level=logging.ERROR, error=repr(exc))
            if self.last_written is not None:
                metrics.SNAPSHOT_AGE.set(time.monotonic() - self.last_written)
            time.sleep(max(0.0, self.wait_s(started)))

    def wait_s(self, started_s: float) -> float:
        """Seconds until the next round (none when its tick has passed): rounds follow the wall clock's multiples
        of materialize_every_s plus `materialize_lag_s`, just after the workers' flushes."""
        return next_round_at(started_s, self.speed.materialize_every_s, self.speed.materialize_lag_s) - time.time()

    def _stop(self, _signum, _frame) -> None:
        self.stopping = True

    def write_all(self, now_ms: int | None = None) -> int:
        """One round: every active region and 'all', windows 1h and 24h, ranks volume and rise."""
        now_ms = now_ms or int(time.time() * 1000)
        started = time.perf_counter()
        self.merger.run(now_ms)
        rebuilding = self.merger.rebuilding
        with redis_errors("reading the blocklist and the epoch"):
            members, epoch = self.client.pipeline(transaction=False).smembers(self.keys.blocklist).get(
                self.keys.epoch(self.speed.group)).execute()
        blocked = {b.decode() for b in members}
        for cache in (self.sketches, self.top):
            cache.check_epoch(epoch.decode() if epoch else None)
            cache.begin_round()
        written = 0
        authors_cache: dict[tuple[str, str], int] = {}
        self._display_cache: dict[str, str] = {}
        for region in self.active_regions(now_ms):
            for name in ("1h", "24h"):
                written += self._write_window(region, name, now_ms, blocked, authors_cache, rebuilding)
        for cache in (self.sketches, self.top):
            cache.end_round()
        self.last_written = time.monotonic()
        metrics.SNAPSHOT_SECONDS.observe(time.perf_counter() - started)
        metrics.SNAPSHOT_AGE.set(0)
        return written

    def active_regions(self, now_ms: int) -> list[str]:
        """'all' plus every region with mentions in the last 24 hours, re-checked once a minute
        (6,000 keys) and for the current hour (250 keys) every round."""
        if self._regions is None or now_ms - self._regions[0] >= 60_000:
            self._regions = (now_ms, self._regions_with_totals(window_buckets(now_ms, "24h")[1]))
        current = self._regions_with_totals([hour_of(now_ms)])
        return [WORLDWIDE, *sorted(set(self._regions[1]) | set(current))]

    def _regions_with_totals(self, hours: list[int]) -> list[str]:
        regions = sorted(ISO_3166_ALPHA2)
        names = [self.keys.total(r, "h", h) for r in regions for h in hours]
        with redis_errors("finding active regions"):
            values = redis_io.mget(self.client, names)
        return sorted({regions[i // len(hours)] for i, v in enumerate(values) if v is not None})

    def _write_window(self, region: str, name: str, now_ms: int, blocked: set[str], authors_cache,
                      rebuilding: Rebuilding | None = None) -> int:
        """Both ranks of one region's window; `rebuilding` (partitions replaying) goes into each snapshot."""
        window = self.read_window(region, name, now_ms)
        candidates = self.candidates(window)
        counts = self.estimates(window, candidates)
        baselines = self.baselines(window, candidates, now_ms)
        rows = [Scored(t, counts[t], 0, baselines.get(t)) for t in candidates]

        def details(short: list[Scored]) -> list[Scored]:
            tags = [r.tag for r in short]
            authors = self.authors(tags, window, now_ms, authors_cache)
            display = self.displays(tags, window, now_ms)
            return [Scored(r.tag, r.count, authors[r.tag], r.baseline, display.get(r.tag)) for r in short]

        rows = shortlist(rows, self.rules, blocked, details)
        error = error_bound(self.eps, window.approx_total)
        for rank, ranked in (("volume", by_volume(rows, self.rules)), ("rise", by_rise(rows, self.rules))):
            key = self.keys.trending(region, name, rank)
            with redis_errors("writing a snapshot"):
                raw = self.client.get(key)
                previous = previous_ranks(Snapshot.model_validate_json(raw) if raw else None)
                doc = snapshot(region, name, rank, now_ms, window.total, error, window.source, ranked, previous,
                               rebuilding)
                self.client.set(key, orjson.dumps(doc.model_dump()), ex=self.speed.snapshot_ttl_s)
        return 2

    def read_window(self, region: str, name: str, now_ms: int) -> Window:
        """Totals, (24h) which closed hours the batch layer published exactly, then the sketches."""
        unit, buckets = window_buckets(now_ms, name)
        with redis_errors("reading bucket totals"):
            pipe = self.client.pipeline(transaction=False)
            for b in buckets:
                pipe.get(self.keys.total(region, unit, b))
            if unit == "h":
                for b in buckets:
                    pipe.exists(self.keys.exact_hour(region, b))
            replies = pipe.execute()
        n = len(buckets)
        totals = [int(v or 0) for v in replies[:n]]
        current = hour_of(now_ms)
        exact = {b: bool(x) and b < current for b, x in zip(buckets, replies[n:], strict=True)} if unit == "h" else {}
        approx_total = sum(t for b, t in zip(buckets, totals, strict=True) if not exact.get(b))
        sketches = self._sketch_rows([self.keys.cms(region, unit, b) for b in buckets], totals)
        return Window(region, name, unit, buckets, sketches, exact, sum(totals), approx_total, totals)

    def _sketch_rows(self, names: list[str], totals: list[int]) -> list[np.ndarray | None]:
        """Counters per sketch key (None for an empty bucket), read again only when the total moved;
        `totals` must be read first."""

        def fetch(stale: list[str]) -> list[np.ndarray]:
            with redis_errors("reading sketches"):
                return [counters(self.shape, raw) for raw in redis_io.mget(self.client, stale)]

        return self.sketches.read(names, totals, fetch)

    def candidates(self, window: Window) -> list[str]:
        """The union of the buckets' candidate sets, best `rescore` by summed bucket estimates."""

        def fetch(stale: list[str]) -> list[list[tuple[str, float]]]:
            with redis_errors("reading candidates"):
                pipe = self.client.pipeline(transaction=False)
                for name in stale:
                    pipe.zrange(name, 0, _PER_BUCKET - 1, desc=True, withscores=True)
                return [[(tag.decode(), score) for tag, score in rows] for rows in pipe.execute()]

        names = [self.keys.candidates(window.region, window.unit, b) for b in window.buckets]
        union: Counter = Counter()
        for rows in self.top.read(names, window.totals, fetch):
            for tag, score in rows or ():
                union[tag] += score
        return [t for t, _ in union.most_common(self.speed.rescore)]

    def estimates(self, window: Window, tags: list[str]) -> dict[str, int]:
        """Window estimate per tag: exact counts for published hours, else the per-bucket sketch minima."""
        exact_counts: dict[int, list] = {}
        exact_buckets = [b for b in window.buckets if window.exact.get(b)]
        if exact_buckets and tags:
            with redis_errors("reading exact hours"):
                pipe = self.client.pipeline(transaction=False)
                for b in exact_buckets:
                    pipe.hmget(self.keys.exact_hour(window.region, b), tags)
                exact_counts = dict(zip(exact_buckets, pipe.execute(), strict=True))
        approx = [row for b, row in zip(window.buckets, window.sketches, strict=True)
                  if b not in exact_counts and row is not None]
        sums = sum_of_minima(approx, [self.cells(t) for t in tags])
        return {tag: int(sums[i]) + sum(int(v[i] or 0) for v in exact_counts.values()) for i, tag in enumerate(tags)}

    def baselines(self, window: Window, tags: list[str], now_ms: int) -> dict[str, float]:
        """Expected count per tag: the batch layer's hour-of-week baselines, else the previous window."""
        if not tags:
            return {}
        hours = [hour_of(now_ms)] if window.name == "1h" else window.buckets
        region = window.region
        with redis_errors("reading baselines"):
            pipe = self.client.pipeline(transaction=False)
            for h in hours:
                pipe.exists(self.keys.baseline(region, hour_of_week(h)))
            published = [h for h, found in zip(hours, pipe.execute(), strict=True) if found]
            for h in published:
                pipe.hmget(self.keys.baseline(region, hour_of_week(h)), tags)
            replies = pipe.execute() if published else []
        if replies:
            # hours the batch layer has no baseline for yet count as the published ones' average:
            # summing only some of the 24 would make a low baseline and an inflated rise
            scale = len(hours) / len(published)
            return {t: scale * sum(float(row[i] or 0) for row in replies) for i, t in enumerate(tags)}
        size = len(window.buckets)
        previous = [b - size for b in window.buckets]
        with redis_errors("reading the previous window"):
            names = [self.keys.total(region, window.unit, b) for b in previous]
            totals = [int(v or 0) for v in redis_io.mget(self.client, names)]
        rows = self._sketch_rows([self.keys.cms(region, window.unit, b) for b in previous], totals)
        sums = sum_of_minima([r for r in rows if r is not None], [self.cells(t) for t in tags])
        return {t: float(sums[i]) for i, t in enumerate(tags)}

    def authors(self, tags: list[str], window: Window, now_ms: int, cache) -> dict[str, int]:
        """Distinct authors (the union of the merger's author sketches over the window's hours), cached across
        regions."""
        first_ms = window.buckets[0] * unit_ms(window.unit)
        hours = list(range(hour_of(first_ms), hour_of(now_ms) + 1))
        missing = [t for t in tags if (t, window.name) not in cache]
        if missing:
            cache.update(self._merged_authors(missing, hours, window.name))
        return {t: cache[(t, window.name)] for t in tags}

    def _merged_authors(self, tags: list[str], hours: list[int], window: str) -> dict[tuple[str, str], int]:
        """Distinct authors per tag: the union of the tag's hours, estimated here (the merger's author sketches
        are trendcore.hll bytes, not Redis HyperLogLogs). One MGET a tag, pipelined: a tag's hours share its hash
        tag (one slot), and a GET an hour made the command packing a tenth of the materializer's time."""
        with redis_errors("counting authors"):
            pipe = self.client.pipeline(transaction=False)
            for t in tags:
                redis_io.pipe_mget(pipe, [self.keys.merged_authors(t, h) for h in hours])
            rows = pipe.execute()
        found = {}
        for t, blobs in zip(tags, rows, strict=True):
            union = merge_authors(blobs)
            found[(t, window)] = round(union.estimate()) if union is not None else 0
        return found

    def displays(self, tags: list[str], window: Window, now_ms: int) -> dict[str, str]:
        """Display spelling per tag (worldwide): the newest hour that has one, cached for the round."""
        cache = self._display_cache
        missing = [t for t in tags if t not in cache]
        if missing:
            newest = hour_of(now_ms)
            hours = [newest, newest - 1] if window.name == "1h" else list(range(newest, newest - 24, -1))
            with redis_errors("reading display spellings"):
                pipe = self.client.pipeline(transaction=False)
                for h in hours:
                    pipe.hmget(self.keys.display(h), missing)
                replies = pipe.execute()
            for row in replies:
                for t, v in zip(missing, row, strict=True):
                    if v is not None and t not in cache:
                        cache[t] = v.decode()
        return {t: cache[t] for t in tags if t in cache}
