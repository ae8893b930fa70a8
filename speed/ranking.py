"""Trending lists (pure): rank re-scored candidates by volume and by rise, build the snapshot.

The snapshot is `trendcore.snapshot.Snapshot`, exactly what `GET /trending` serves (docs/redis-layout.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from trendcore.events import format_time
from trendcore.scoring import rank_changes, rise_score
from trendcore.snapshot import Rebuilding, Snapshot, TrendEntry


@dataclass(frozen=True, slots=True)
class Scored:
    """One candidate tag of a window: estimated count (never below the truth) and what ranks it."""

    tag: str
    count: int
    authors: int
    baseline: float | None = None
    display: str | None = None


@dataclass(frozen=True, slots=True)
class Rules:
    """Who may trend and how rise is scored."""

    top_k: int = 100
    min_authors: int = 3
    rise_min_count: int = 10
    a: float = 5.0
    b: float = 10.0


def eligible(rows: Iterable[Scored], rules: Rules, blocked: set[str]) -> list[Scored]:
    """Drop blocked tags and tags with too few distinct authors (the anti-brigading floor)."""
    return [r for r in rows if r.tag not in blocked and r.authors >= rules.min_authors and r.count > 0]


def by_volume(rows: Iterable[Scored], rules: Rules) -> list[tuple[Scored, float | None]]:
    """Top K by count (ties by tag, so equal inputs give equal lists)."""
    ranked = sorted(rows, key=lambda r: (-r.count, r.tag))[: rules.top_k]
    return [(r, None) for r in ranked]


def by_rise(rows: Iterable[Scored], rules: Rules) -> list[tuple[Scored, float | None]]:
    """Top K by (count + a) / (baseline + b) among tags with at least the minimum count."""
    scored = [(r, rise_score(r.count, r.baseline or 0.0, rules.a, rules.b))
              for r in rows if r.count >= rules.rise_min_count]
    scored.sort(key=lambda pair: (-pair[1], -pair[0].count, pair[0].tag))
    return scored[: rules.top_k]


def shortlist(rows: list[Scored], rules: Rules, blocked: set[str],
              details: Callable[[list[Scored]], list[Scored]]) -> list[Scored]:
    """The eligible rows both top-K lists need, with authors (and display) looked up by `details`
    for as few tags as will do: the first 2K by volume and by rise, widened (doubling) while
    either order has fewer than K eligible among those looked at and rows remain. Looking up only
    the first 2K would leave the lists short whenever many high counts are brigaded (too few authors)."""
    open_rows = [r for r in rows if r.tag not in blocked and r.count > 0]
    everything = replace(rules, top_k=len(open_rows))
    orders = [[r for r, _ in by_volume(open_rows, everything)], [r for r, _ in by_rise(open_rows, everything)]]
    looked: dict[str, Scored] = {}
    depth = 2 * rules.top_k
    while True:
        wanted = {r.tag: r for order in orders for r in order[:depth] if r.tag not in looked}
        if wanted:
            looked.update((r.tag, r) for r in details(sorted(wanted.values(), key=lambda r: r.tag)))
        ok = {r.tag for r in eligible(looked.values(), rules, blocked)}
        if all(depth >= len(order) or sum(r.tag in ok for r in order[:depth]) >= rules.top_k for order in orders):
            return [looked[t] for t in sorted(ok)]
        depth *= 2


def previous_ranks(previous: Snapshot | None) -> dict[str, int]:
    """tag -> rank in the list's previous snapshot (empty when there is none)."""
    if previous is None:
        return {}
    return {e.tag: e.rank for e in previous.entries}


def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """True when the closed intervals [lower, upper] `a` and `b` share a value (a tie counts)."""
    return a[0] <= b[1] and b[0] <= a[1]


def settled(bounds: list[tuple[int, int]]) -> list[bool]:
    """Per entry of a list, in its order: True when its (lower, upper) bounds overlap neither the previous nor the
    next entry's, so the true counts cannot put it on the other side of a neighbour."""
    return [not ((i > 0 and overlaps(b, bounds[i - 1])) or (i + 1 < len(bounds) and overlaps(b, bounds[i + 1])))
            for i, b in enumerate(bounds)]


def snapshot(
    region: str, window: str, rank: str, now_ms: int, total: int, error: int, source: str,
    ranked: list[tuple[Scored, float | None]], previous: Mapping[str, int], rebuilding: Rebuilding | None = None,
) -> Snapshot:
    """The snapshot: entries with count, bounds, authors, source, rank change, score, baseline, whether the rank
    is settled; `rebuilding` when the speed layer replays partitions (its counts are low meanwhile).

    Authors are capped at the count beside them: the author sketch covers whole hours (a 1 h window
    touches two) and worldwide, and has its own error, so uncapped it could exceed the posts counted."""
    changes = rank_changes(previous, [r.tag for r, _ in ranked])
    slack = 0 if source == "exact" else error
    bounds = [(max(0, r.count - slack), r.count) for r, _ in ranked]
    entries = [
        TrendEntry(rank=i, tag=r.tag, display=r.display or r.tag, count=r.count, upper_bound=upper,
                   lower_bound=lower, source=source, authors=min(r.authors, r.count),
                   rank_change=change,
                   score=None if score is None else round(score, 6),
                   baseline=None if rank == "volume" or r.baseline is None else r.baseline, settled=fixed)
        for i, ((r, score), change, (lower, upper), fixed)
        in enumerate(zip(ranked, changes, bounds, settled(bounds), strict=True), start=1)
    ]
    return Snapshot(region=region, window=window, rank=rank, computed_at=format_time(now_ms),
                    computed_at_ms=now_ms, total=total, error_bound=error, entries=entries, rebuilding=rebuilding)
