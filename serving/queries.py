"""Read-side answers (count, series, posts) built from store reads and the merge rules."""

from __future__ import annotations

import heapq

import redis

from serving import store
from serving.errors import BadRequest
from serving.merge import Bucket, Segment, combine, range_plan, regroup, window_plan
from trendcore.events import format_time
from trendcore.keys import KeySpace
from trendcore.post_lists import NewPost, TopPost, decode_posts, decode_top_posts
from trendcore.settings import Settings
from trendcore.windows import DAY_MS, HOUR_MS, MINUTE_MS, WINDOWS

STEPS = {"1m": MINUTE_MS, "5m": 5 * MINUTE_MS, "10m": 10 * MINUTE_MS, "15m": 15 * MINUTE_MS, "30m": 30 * MINUTE_MS,
         "1h": HOUR_MS, "2h": 2 * HOUR_MS, "3h": 3 * HOUR_MS, "6h": 6 * HOUR_MS, "12h": 12 * HOUR_MS, "24h": DAY_MS}
WINDOW_MS = {"1h": HOUR_MS, "24h": DAY_MS}


def spans(segments: list[Segment]) -> list[dict]:
    """Consecutive segments of the same source merged into spans: which parts are exact, which approximate."""
    out: list[dict] = []
    for seg in segments:
        if out and out[-1]["source"] == seg.source and out[-1]["end_ms"] == seg.bucket.start_ms:
            out[-1]["end_ms"] = seg.bucket.end_ms
            out[-1]["count"] += seg.count
        else:
            out.append({"start_ms": seg.bucket.start_ms, "end_ms": seg.bucket.end_ms, "source": seg.source,
                        "count": seg.count})
    return [{"start": format_time(s["start_ms"]), "end": format_time(s["end_ms"]), "source": s["source"],
             "count": s["count"]} for s in out]


def _hours_of(plan: list[Bucket]) -> list[int]:
    """Hour indexes a plan touches (for display names and authors)."""
    first, last = plan[0].start_ms // HOUR_MS, (plan[-1].end_ms - 1) // HOUR_MS
    return list(range(first, last + 1))


def count(client: redis.Redis, keys: KeySpace, settings: Settings, tag: str, region: str, plan: list[Bucket],
          now_ms: int, window: str | None) -> dict:
    """The merged count of a tag over a plan of buckets, with bounds and exact/approx spans."""
    segments = store.count_segments(client, keys, settings, region, tag, plan, now_ms)
    answer = combine(segments, settings.sketch.eps)
    hours = _hours_of(plan)
    return {
        "tag": tag, "display": store.display_name(client, keys, tag, hours[-48:]), "region": region, "window": window,
        "start": format_time(plan[0].start_ms), "end": format_time(plan[-1].end_ms),
        "count": answer.count, "lower_bound": answer.lower_bound, "upper_bound": answer.upper_bound,
        "source": answer.source, "eps": settings.sketch.eps,
        "authors": min(store.distinct_authors(client, keys, tag, hours), answer.count) if window else None,
        "spans": spans(segments),
        "rebuilding": store.rebuilding(client, keys),
    }


def window_count(client: redis.Redis, keys: KeySpace, settings: Settings, tag: str, region: str, window: str,
                 now_ms: int) -> dict:
    return count(client, keys, settings, tag, region, window_plan(now_ms, window), now_ms, window)


def range_count(client: redis.Redis, keys: KeySpace, settings: Settings, tag: str, region: str,
                hours: tuple[int, int], now_ms: int) -> dict:
    return count(client, keys, settings, tag, region, range_plan(*hours), now_ms, None)


def step_of(window: str, step: str | None) -> tuple[str, int]:
    """The series step: default one bucket; must be a whole number of buckets dividing the window."""
    unit_ms = MINUTE_MS if WINDOWS[window][0] == "m" else HOUR_MS
    name = step or ("1m" if window == "1h" else "1h")
    step_ms = STEPS.get(name)
    if step_ms is None or step_ms % unit_ms or WINDOW_MS[window] % step_ms:
        allowed = [s for s, ms in STEPS.items() if ms % unit_ms == 0 and WINDOW_MS[window] % ms == 0]
        raise BadRequest(f"step: {name!r} does not fit window {window}; use one of {', '.join(allowed)}")
    return name, step_ms


def series(client: redis.Redis, keys: KeySpace, settings: Settings, tag: str, region: str, window: str,
           step: str | None, now_ms: int) -> dict:
    """Counts per step over a window, for sparklines; closed hours use the exact view where published."""
    name, step_ms = step_of(window, step)
    plan = window_plan(now_ms, window)
    segments = store.count_segments(client, keys, settings, region, tag, plan, now_ms)
    points = []
    for start, group in regroup(segments, step_ms):
        merged = combine(group, settings.sketch.eps)
        points.append({"start": format_time(start), "start_ms": start, "count": merged.count,
                       "lower_bound": merged.lower_bound, "source": merged.source})
    return {"tag": tag, "display": store.display_name(client, keys, tag, _hours_of(plan)[-2:]), "region": region,
            "window": window, "step": name, "points": points, "rebuilding": store.rebuilding(client, keys)}


def posts(client: redis.Redis, keys: KeySpace, tag: str, k: int, sort: str, day: int | None, now_ms: int) -> dict:
    """Top (by engagement) or newest posts: a published closed day from the batch layer, else the speed layer's
    hours from the merger's post lists (bodies inside); a published day's bodies come from those lists too,
    where they still hold the post."""
    now_hour = now_ms // HOUR_MS
    hours = range(day * 24, day * 24 + 24) if day is not None else range(now_hour - 23, now_hour + 1)
    exact = keys.exact_top_posts(tag, day) if day is not None and sort == "top" else None
    if exact is not None and store.key_exists(client, exact):
        source, answered = "exact", _exact_day_posts(client, keys, tag, exact, hours, k)
    else:
        source, answered = "approx", _merged_posts(client, keys, tag, sort, hours, k)
    return {"tag": tag, "sort": sort, "source": source, "start": format_time(hours[0] * HOUR_MS),
            "end": format_time((hours[-1] + 1) * HOUR_MS), "posts": answered}


def _exact_day_posts(client: redis.Redis, keys: KeySpace, tag: str, exact: str, hours: range, k: int) -> list[dict]:
    """The k best posts of the batch layer's published day, with bodies where a merged list still holds them."""
    bodies = _listed_bodies(client, keys, tag, hours)
    ranked = store.exact_posts(client, exact, k)
    return [_listed(bodies[pid], score) if pid in bodies else _unlisted(pid, score) for pid, score in ranked]


def _merged_posts(client: redis.Redis, keys: KeySpace, tag: str, sort: str, hours: range, k: int) -> list[dict]:
    """The k best (top) or newest (recent) posts of the merger's lists of the tag's hours."""
    names = [(keys.merged_top_posts if sort == "top" else keys.merged_new_posts)(tag, h) for h in hours]
    return [_listed(entry, score) for entry, score in ranked_lists(store.post_lists(client, names), sort, k)]


def ranked_lists(blobs: list[bytes | None], sort: str, k: int) -> list[tuple[NewPost | TopPost, float]]:
    """The k best entries of the merger's lists of a tag's hours (None: no list that hour), with their scores:
    `top` by summed engagement weight, `recent` by created ms, ties by the higher post id."""
    decode = decode_top_posts if sort == "top" else decode_posts
    entries: dict[str, NewPost | TopPost] = {}
    scores: dict[str, float] = {}
    for blob in blobs:
        for entry in decode(blob) if blob is not None else ():
            entries[entry.post_id] = entry
            score = float(entry.score) if isinstance(entry, TopPost) else float(entry.created_ms)
            scores[entry.post_id] = scores.get(entry.post_id, 0.0) + score if sort == "top" else score
    best = heapq.nlargest(k, scores.items(), key=lambda kv: (kv[1], kv[0]))
    return [(entries[pid], score) for pid, score in best]


def _listed_bodies(client: redis.Redis, keys: KeySpace, tag: str, hours: range) -> dict[str, NewPost | TopPost]:
    """The posts the merger's lists of a tag's hours hold, by post id (for a published day's bodies)."""
    names = [*(keys.merged_new_posts(tag, h) for h in hours), *(keys.merged_top_posts(tag, h) for h in hours)]
    blobs = store.post_lists(client, names)
    found: dict[str, NewPost | TopPost] = {}
    for i, blob in enumerate(blobs):
        if blob is not None:
            entries = decode_posts(blob) if i < len(hours) else decode_top_posts(blob)
            found.update((e.post_id, e) for e in entries)
    return found


def _listed(entry: NewPost | TopPost, score: float) -> dict:
    """One post for the answer, from a merged list's entry."""
    return {"post_id": entry.post_id, "score": score, "text": entry.text, "region": entry.region,
            "user_id": entry.user_id, "created_at": format_time(entry.created_ms)}


def _unlisted(post_id: str, score: float) -> dict:
    """One post of a published day no merged list holds any more: its id and score, no body."""
    return {"post_id": post_id, "score": score, "text": None, "region": None, "user_id": None, "created_at": None}
