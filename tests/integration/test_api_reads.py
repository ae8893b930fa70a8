"""Read endpoints against a real Redis holding the documented layout: merge, bounds, spellings, 4xx."""

from __future__ import annotations

import time
import urllib.parse

import orjson
import pytest
from fastapi.testclient import TestClient

from serving.app import create_app
from tests.integration.layout import unique
from trendcore.post_lists import TopPost
from trendcore.windows import DAY_MS, HOUR_MS, MINUTE_MS

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def api(stack):
    api = stack.api.model_copy(update={"token": "t0ken", "readiness_probe": "AQ:1h:volume"})
    with TestClient(create_app(stack.model_copy(update={"api": api}))) as client:
        yield client


def now_ms() -> int:
    return int(time.time() * 1000)


def test_count_1h_window_sums_minute_sketches(api, writer):
    tag, minute = unique("win"), now_ms() // MINUTE_MS
    for back, n in [(0, 5), (10, 7), (59, 11), (60, 1000)]:  # minute 60 back is outside the window
        writer.sketch("all", "m", minute - back, {tag: n, unique("noise"): 20})
    body = api.get(f"/tags/{tag}/count", params={"window": "1h"}).json()
    assert body["source"] == "approx" and body["count"] == 23
    assert body["lower_bound"] <= 23 <= body["upper_bound"] == body["count"]
    assert body["spans"][0]["source"] == "approx" and body["tag"] == tag


def test_the_sketch_script_reads_what_a_pipeline_reads(stack, writer):
    """serving/sketch_reads.lua (a single server's window read) gives each bucket the least of the tag's cells
    and N, as a BITFIELD_RO and a GET a bucket do (the cluster's path); a missing bucket reads 0 and 0."""
    from serving import store
    from serving.merge import Bucket
    from trendcore.cms import cell_indexes
    from trendcore.keys import KeySpace

    tag, minute, shape = unique("script"), now_ms() // MINUTE_MS, stack.sketch.shape
    region = unique("region")  # buckets no other test writes
    for back, counts in [(1, {tag: 3, unique("noise"): 9}), (2, {unique("other"): 40}), (4, {tag: 250})]:
        writer.sketch(region, "m", minute - back, counts)
    buckets = [Bucket("m", minute - back) for back in range(6)]
    keys, cells = KeySpace.of(stack), cell_indexes(tag, shape)
    got = store._sketch_segments(writer.client, keys, shape, region, tag, buckets)
    pipe, fields = writer.client.pipeline(transaction=False), [("u32", f"#{c}") for c in cells[1:]]
    for b in buckets:
        pipe.bitfield_ro(keys.cms(region, b.unit, b.index), "u32", f"#{cells[0]}", fields)
        pipe.get(keys.total(region, b.unit, b.index))
    replies = pipe.execute()
    assert [(s.count, s.total) for s in got] == \
        [(min(replies[2 * i]), int(replies[2 * i + 1] or 0)) for i in range(len(buckets))]
    assert [s.count for s in got][1::3] == [3, 250] and got[2].total == 40 and got[0].total == got[5].total == 0


def test_count_range_is_approx_until_published_then_exact(api, writer):
    tag, hour = unique("merge"), now_ms() // HOUR_MS
    truth = {hour - 4: 40, hour - 3: 30, hour - 2: 20}
    for h, n in truth.items():
        writer.sketch("FR", "h", h, {tag: n + 3})  # the sketch overcounts by 3 (collisions), as it may
    params = {"region": "FR", "from": _hour_text(hour - 4), "to": _hour_text(hour - 1)}
    before = api.get(f"/tags/{tag}/count", params=params).json()
    assert (before["source"], before["count"]) == ("approx", 99)
    writer.exact("FR", "h", hour - 4, {tag: truth[hour - 4]})
    mixed = api.get(f"/tags/{tag}/count", params=params).json()
    assert (mixed["source"], mixed["count"]) == ("mixed", 40 + 33 + 23)
    assert [s["source"] for s in mixed["spans"]] == ["exact", "approx"]
    writer.exact("FR", "h", hour - 3, {tag: truth[hour - 3]})
    writer.exact("FR", "h", hour - 2, {tag: truth[hour - 2]})
    after = api.get(f"/tags/{tag}/count", params=params).json()
    total = sum(truth.values())
    assert (after["source"], after["count"], after["lower_bound"]) == ("exact", total, total)


def test_published_hour_without_the_tag_counts_zero(api, writer):
    tag, hour = unique("absent"), now_ms() // HOUR_MS - 3
    writer.sketch("DE", "h", hour, {tag: 9})
    writer.exact("DE", "h", hour, {unique("someone"): 4})
    params = {"region": "DE", "from": _hour_text(hour), "to": _hour_text(hour + 1)}
    body = api.get(f"/tags/{tag}/count", params=params).json()
    assert (body["source"], body["count"]) == ("exact", 0)


def test_count_over_a_published_day_and_an_expired_one(api, writer):
    tag, today = unique("day"), now_ms() // DAY_MS
    # Days wholly older than the 26 h of hour sketches, whatever the time of day the test runs at
    # (yesterday's last hours are still kept just after midnight UTC).
    writer.exact("IT", "d", today - 2, {tag: 1234})
    params = {"region": "IT", "from": _day_text(today - 3), "to": _day_text(today - 1)}
    body = api.get(f"/tags/{tag}/count", params=params).json()
    assert body["count"] == 1234 and body["source"] == "exact"
    assert [s["source"] for s in body["spans"]][-1] == "exact" and body["spans"][-1]["count"] == 1234
    assert "missing" in {s["source"] for s in body["spans"]}  # three days ago: hour sketches are gone (26 h)


def test_hour_sketches_count_as_long_as_the_speed_layer_keeps_them(api, stack, writer):
    tag, hour = unique("kept"), now_ms() // HOUR_MS - 40
    writer.sketch("NL", "h", hour, {tag: 6})
    params = {"region": "NL", "from": _hour_text(hour), "to": _hour_text(hour + 1)}
    assert api.get(f"/tags/{tag}/count", params=params).json()["source"] == "missing"  # default: 26 hours kept
    longer = stack.model_copy(update={"speed": stack.speed.model_copy(update={"keep_hours": 48})})
    with TestClient(create_app(longer)) as client:
        body = client.get(f"/tags/{tag}/count", params=params).json()
    assert (body["source"], body["count"]) == ("approx", 6)


@pytest.mark.parametrize("spelling", ["#{}", "{}", "{}_UPPER", "fullwidth"])
def test_tag_spellings_in_paths_share_one_key(api, writer, spelling):
    base = unique("café")
    fullwidth = "＃" + "".join(chr(ord(c) + 0xFEE0) if c.isascii() else c for c in base)
    tag = {"#{}": "#" + base, "{}": base, "{}_UPPER": base.upper(), "fullwidth": fullwidth}[spelling]
    writer.sketch("all", "m", now_ms() // MINUTE_MS, {base: 4})
    body = api.get("/tags/" + urllib.parse.quote(tag, safe="") + "/count").json()
    assert body["tag"] == base and body["count"] == 4


def test_trending_serves_the_snapshot_cached_for_at_most_a_second(api, writer):
    first, second = unique("top"), unique("second")
    doc = writer.snapshot("AQ", "1h", "volume", [(first, 50), (second, 20), (unique("third"), 5)])
    body = api.get("/trending", params={"region": "AQ", "k": 2}).json()
    assert [e["tag"] for e in body["entries"]] == [first, second] and body["k"] == 2
    assert body["computed_at"] == doc["computed_at"] and 0 <= body["age_s"] < 5
    writer.snapshot("AQ", "1h", "volume", [(second, 60), (first, 55)])
    assert api.get("/trending", params={"region": "AQ", "k": 2}).json()["entries"][0]["tag"] == first  # cached
    time.sleep(1.05)
    assert api.get("/trending", params={"region": "AQ", "k": 2}).json()["entries"][0]["tag"] == second
    assert 'outcome="fast"' in api.get("/metrics").text


def test_concurrent_requests_for_an_expired_answer_read_redis_once(stack, writer):
    import asyncio

    import httpx

    tag = unique("herd")
    writer.snapshot("AQ", "24h", "volume", [(tag, 9)])
    app = create_app(stack)

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as client:
            params = {"region": "AQ", "window": "24h", "k": 1}
            return await asyncio.gather(*[client.get("/trending", params=params) for _ in range(50)])

    replies = asyncio.run(burst())
    assert {r.json()["entries"][0]["tag"] for r in replies} == {tag}
    registry = app.state.services.metrics.registry
    misses = registry.get_sample_value("trends_api_trending_cache_total", {"outcome": "miss"})
    app.state.services.close()
    assert misses == 1


def test_an_answer_near_expiry_is_reread_in_the_background(api, writer):
    old, new = unique("old"), unique("new")
    writer.snapshot("AQ", "24h", "rise", [(old, 1)])
    params = {"region": "AQ", "window": "24h", "rank": "rise", "k": 1}
    api.get("/trending", params=params)
    first = api.app.state.services.cache.answers[("AQ", "24h", "rise", 1)]
    writer.snapshot("AQ", "24h", "rise", [(new, 2)])
    time.sleep(max(0.0, first.refresh_at - time.monotonic()) + 0.01)
    assert api.get("/trending", params=params).json()["entries"][0]["tag"] == old  # still fresh: served at once
    answers = api.app.state.services.cache.answers
    while time.monotonic() < first.expires - 0.01 and answers[("AQ", "24h", "rise", 1)] is first:
        time.sleep(0.005)
    assert answers[("AQ", "24h", "rise", 1)] is not first  # re-read before the old one expired
    assert api.get("/trending", params=params).json()["entries"][0]["tag"] == new


def test_trending_without_snapshot_is_empty_not_an_error(api):
    body = api.get("/trending", params={"region": "BV", "window": "24h", "rank": "rise"}).json()
    assert body["entries"] == [] and body["computed_at"] is None and body["rank"] == "rise"


def test_series_marks_published_hours_exact(api, writer):
    tag, hour = unique("spark"), now_ms() // HOUR_MS
    for back, n in [(1, 10), (2, 20), (5, 50)]:
        writer.sketch("all", "h", hour - back, {tag: n})
    writer.exact("all", "h", hour - 2, {tag: 19})
    body = api.get(f"/tags/{tag}/series", params={"window": "24h", "step": "1h"}).json()
    points = {p["start_ms"] // HOUR_MS: p for p in body["points"]}
    assert len(body["points"]) == 24
    seen = (points[hour - 1]["count"], points[hour - 2]["count"], points[hour - 2]["source"], points[hour - 5]["count"])
    assert seen == (10, 19, "exact", 50)
    assert len(api.get(f"/tags/{tag}/series", params={"window": "1h", "step": "5m"}).json()["points"]) in (12, 13)


def test_posts_top_by_summed_engagement_and_recent(api, writer):
    tag, hour = unique("posts"), now_ms() // HOUR_MS
    start = hour * HOUR_MS  # each post in the lists of the hour it was created in, as the merger keeps them
    writer.post(tag, hour - 1, TopPost(5.0, start - 3_000_000, "p1", "first #" + tag, "US", "u1"))
    writer.post(tag, hour, TopPost(11.0, start + 2, "p2", "second", "US", "u1"))  # engagement weights 7 + 4
    writer.post(tag, hour, TopPost(9.0, start + 1, "p3", "third", "US", "u1"))
    top = api.get(f"/tags/%23{tag}/posts").json()
    assert [p["post_id"] for p in top["posts"]] == ["p2", "p3"] and top["posts"][0]["score"] == 11
    assert top["posts"][0]["text"] == "second" and top["posts"][0]["created_at"].endswith("Z")
    recent = api.get(f"/tags/{tag}/posts", params={"sort": "recent", "k": 3}).json()
    assert [p["post_id"] for p in recent["posts"]] == ["p2", "p3", "p1"]


def test_posts_of_a_published_day_come_from_the_batch_layer(api, writer):
    tag, day = unique("dayposts"), now_ms() // DAY_MS - 1
    writer.client.zadd(f"exact_posts:{tag}:d:{day}", {"b1": 3, "b2": 8, "b3": 1})
    writer.client.expire(f"exact_posts:{tag}:d:{day}", 600)
    writer.post(tag, day * 24 + 23, TopPost(2.0, day * DAY_MS + 23 * HOUR_MS, "b2", "body of b2", "FR", "u2"))
    body = api.get(f"/tags/{tag}/posts", params={"day": _day_text(day), "k": 2}).json()
    assert body["source"] == "exact" and [p["post_id"] for p in body["posts"]] == ["b2", "b1"]
    assert [p["score"] for p in body["posts"]] == [8, 3]  # the batch layer's scores, not the list's
    assert [p["text"] for p in body["posts"]] == ["body of b2", None]  # bodies where a merged list holds the post


@pytest.mark.parametrize("path, params, needle", [
    ("/trending", {"window": "2h"}, "window"),
    ("/trending", {"region": "XX"}, "region"),
    ("/trending", {"k": 101}, "100"),
    ("/trending", {"rank": "loud"}, "rank"),
    ("/tags/abc/count", {"from": "2026-11-29T19"}, "from/to"),
    ("/tags/abc/count", {"from": "2026-11-29T19:30Z", "to": "2026-11-29T20"}, "boundary"),
    ("/tags/123/count", {}, "hashtag"),
    ("/tags/abc/series", {"window": "24h", "step": "5m"}, "step"),
    ("/tags/abc/posts", {"day": "tomorrow"}, "day"),
])
def test_bad_reads_get_422_saying_what(api, path, params, needle):
    reply = api.get(path, params=params)
    assert reply.status_code == 422 and needle in reply.text


def test_health_and_readiness(api, writer):
    assert api.get("/healthz").json()["status"] == "ok"
    writer.snapshot("AQ", "1h", "volume", [("x", 1)], computed_at_ms=now_ms() - 3_600_000)
    stale = api.get("/readyz")
    assert stale.status_code == 503 and "old" in stale.json()["checks"]["snapshot"]
    writer.snapshot("AQ", "1h", "volume", [("x", 1)])
    ready = api.get("/readyz")
    assert ready.status_code == 200 and ready.json()["checks"] == {"redis": "ok", "kafka": "ok", "snapshot": "ok"}


def test_dashboard_page_and_openapi(api):
    page = api.get("/")
    assert page.status_code == 200 and "/static/app.js" in page.text
    assert api.get("/static/app.js").status_code == 200
    paths = set(orjson.loads(api.get("/openapi.json").content)["paths"])
    assert paths >= {"/trending", "/tags/{tag}/count", "/posts", "/events", "/readyz"}


def _hour_text(hour: int) -> str:
    return time.strftime("%Y-%m-%dT%H:00Z", time.gmtime(hour * 3600))


def _day_text(day: int) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(day * 86400))
