"""Micro-batch parsing and pre-aggregation: dedup, dead letters, late events, bucket coordinates."""

from __future__ import annotations

import orjson

from speed.aggregate import MAX_DEAD_VALUE_BYTES, aggregate_engagements, aggregate_posts, parse_batch
from trendcore.events import format_time
from trendcore.windows import HOUR_MS, MINUTE_MS

NOW = 1_795_982_405_000


def post(pid: str, text: str, ago_ms: int = 0, region: str = "US", user: str = "u1") -> bytes:
    return orjson.dumps({"v": 1, "type": "post", "post_id": pid, "user_id": user, "region": region,
                         "text": text, "created_at": format_time(NOW - ago_ms)})


def test_parse_batch_keeps_offsets_dedups_and_dead_letters():
    records = [(10, b"a", post("a", "#x")), (11, b"a", post("a", "#x")), (12, b"b", b"\xff"), (13, b"c", b"[]")]
    parsed = parse_batch(records, "post", NOW, 300_000)
    assert (parsed.start, parsed.next) == (10, 14)
    assert [p.post_id for p in parsed.posts] == ["a"] and parsed.duplicates == 1
    assert [d.offset for d in parsed.dead] == [12, 13]
    doc = parsed.dead[0].document("posts", 3, NOW)
    assert doc["partition"] == 3 and doc["offset"] == 12 and "value_b64" in doc and "UTF-8" in doc["reason"]
    assert parsed.dead[1].document("posts", 3, NOW)["value"] == "[]"


def test_a_tombstone_is_dead_lettered_not_a_crash():
    parsed = parse_batch([(5, b"k", None), (6, b"a", post("a", "#x"))], "post", NOW, 300_000)
    assert [p.post_id for p in parsed.posts] == ["a"] and [d.offset for d in parsed.dead] == [5]
    doc = parsed.dead[0].document("posts", 0, NOW)
    assert doc["tombstone"] is True and doc["value"] is None and "tombstone" in doc["reason"]
    assert orjson.loads(orjson.dumps(doc))["offset"] == 5


def test_an_oversized_value_is_cut_so_the_dead_letter_fits_a_kafka_record():
    utf8 = ("x" + "é" * MAX_DEAD_VALUE_BYTES).encode()  # 2 bytes a character after one: the cut splits one
    controls = b"\x01" * (4 * MAX_DEAD_VALUE_BYTES)  # JSON escapes each as 6 bytes
    binary = b"\xff" * (4 * MAX_DEAD_VALUE_BYTES)
    parsed = parse_batch([(0, None, utf8), (1, None, controls), (2, None, binary)], "post", NOW, 300_000)
    docs = [d.document("posts", 0, NOW) for d in parsed.dead]
    assert [d["value_bytes"] for d in docs] == [len(utf8), len(controls), len(binary)]
    assert all(d["truncated"] for d in docs)
    assert docs[0]["value"] == "x" + "é" * (MAX_DEAD_VALUE_BYTES // 2 - 1) and "value_b64" in docs[2]
    assert max(len(orjson.dumps(d)) for d in docs) < 1_000_000  # the broker's default record limit


def test_a_huge_invalid_field_still_makes_a_small_dead_letter():
    huge_region = orjson.dumps({"v": 1, "type": "post", "post_id": "p", "user_id": "u", "region": "\x01" * 900_000,
                                "text": "", "created_at": format_time(NOW)})
    doc = parse_batch([(0, b"\x01" * 100_000, huge_region)], "post", NOW, 300_000).dead[0].document("posts", 0, NOW)
    assert doc["field"] == "region" and len(orjson.dumps(doc)) < 1_000_000  # librdkafka's message.max.bytes


def test_a_small_value_is_kept_whole():
    doc = parse_batch([(0, None, b"not json")], "post", NOW, 300_000).dead[0].document("posts", 0, NOW)
    assert doc["value"] == "not json" and "truncated" not in doc


def test_far_future_is_dead_lettered_not_counted():
    parsed = parse_batch([(0, b"f", post("f", "#x", ago_ms=-3_600_000))], "post", NOW, 300_000)
    assert not parsed.posts and parsed.dead[0].field == "created_at"


def test_aggregate_counts_each_tag_once_per_post_in_region_and_all():
    posts = parse_batch([(0, b"a", post("a", "#Zed #zed #Y")), (1, b"b", post("b", "#zed", region="FR"))],
                        "post", NOW, 300_000).posts
    inc = aggregate_posts(posts, known=set(), now_ms=NOW, keep_minutes=120, keep_hours=26)
    minute, hour = NOW // MINUTE_MS, NOW // HOUR_MS
    assert inc.sketches[("all", "m", minute)] == {"zed": 2, "y": 1}
    assert inc.sketches[("US", "h", hour)] == {"zed": 1, "y": 1}
    assert inc.sketches[("FR", "m", minute)] == {"zed": 1}
    assert inc.mentions == 3 and [(p.post_id, tags) for p, tags in inc.posts] == [("a", ["zed", "y"]), ("b", ["zed"])]


def test_known_posts_are_duplicates():
    posts = parse_batch([(0, b"a", post("a", "#x"))], "post", NOW, 300_000).posts
    inc = aggregate_posts(posts, known={"a"}, now_ms=NOW, keep_minutes=120, keep_hours=26)
    assert inc.duplicates == 1 and not inc.sketches and not inc.posts


def test_late_events_go_to_their_bucket_while_kept():
    records = [(0, b"a", post("a", "#x", ago_ms=10 * MINUTE_MS)), (1, b"b", post("b", "#x", ago_ms=90 * MINUTE_MS)),
               (2, b"c", post("c", "#x #y", ago_ms=30 * HOUR_MS))]
    posts = parse_batch(records, "post", NOW, 300_000).posts
    inc = aggregate_posts(posts, known=set(), now_ms=NOW, keep_minutes=60, keep_hours=26)
    assert inc.sketches[("US", "m", (NOW - 10 * MINUTE_MS) // MINUTE_MS)] == {"x": 1}
    assert ("US", "m", (NOW - 90 * MINUTE_MS) // MINUTE_MS) not in inc.sketches
    assert inc.sketches[("US", "h", (NOW - 90 * MINUTE_MS) // HOUR_MS)]["x"] >= 1
    assert inc.late_minute == 1 and inc.late_dropped == 2


def test_engagement_weights_sum_per_post():
    raw = [orjson.dumps({"v": 1, "type": "engagement", "post_id": "p", "user_id": "u", "kind": k, "region": "US",
                         "created_at": format_time(NOW)}) for k in ("like", "view", "view")]
    parsed = parse_batch([(i, b"p", v) for i, v in enumerate(raw)], "engagement", NOW, 300_000)
    assert aggregate_engagements(parsed.engagements, {"like": 10.0, "view": 1.0}) == ({"p": 12.0}, {})


def test_engagement_copies_of_an_event_id_count_once_in_a_step():
    """A retried write's copies (same event_id) weigh once; engagements without an id all count."""
    def eng(kind: str, event_id: str | None) -> bytes:
        doc = {"v": 1, "type": "engagement", "post_id": "p", "user_id": "u", "kind": kind, "region": "US",
               "created_at": format_time(NOW)}
        return orjson.dumps(doc if event_id is None else {**doc, "event_id": event_id})

    raw = [eng("like", "e1"), eng("like", "e1"), eng("view", "e2"), eng("view", None), eng("view", None)]
    parsed = parse_batch([(i, b"p", v) for i, v in enumerate(raw)], "engagement", NOW, 300_000)
    total, by_id = aggregate_engagements(parsed.engagements, {"like": 10.0, "view": 1.0})
    assert total == {"p": 2.0} and by_id == {"p": {"e1": 10.0, "e2": 1.0}}


def _reference_sketches(posts, now_ms: int, keep_minutes: int, keep_hours: int) -> dict:
    """Per mention, per kept unit, region and worldwide: the definition the fast aggregation must match."""
    from collections import Counter, defaultdict

    from trendcore.hashtags import tag_keys
    from trendcore.windows import bucket_of, is_kept

    out: dict = defaultdict(Counter)
    for p in posts:
        for unit, keep in (("m", keep_minutes), ("h", keep_hours)):
            if is_kept(p.created_at_ms, now_ms, unit, keep):
                for region in (p.region, "all"):
                    for tag, _ in tag_keys(p.text):
                        out[(region, unit, bucket_of(p.created_at_ms, unit))][tag] += 1
    return {k: v for k, v in out.items() if v}


def test_aggregate_matches_per_mention_definition_including_late_and_minute_only():
    import random

    rng = random.Random(7)
    texts = ["#a #b", "#A #c #a", "no tags", "#b", "#c #d #e #f"]
    ages = [0, 5 * MINUTE_MS, 90 * MINUTE_MS, 3 * HOUR_MS, 27 * HOUR_MS, 40 * HOUR_MS]
    records = [(i, b"k", post(f"p{i}", rng.choice(texts), ago_ms=rng.choice(ages), region=rng.choice(["US", "FR"])))
               for i in range(300)]
    posts = parse_batch(records, "post", NOW, 300_000).posts
    for keep_minutes, keep_hours in ((120, 26), (60, 2), (2000, 25)):  # last: minutes outlive hours
        inc = aggregate_posts(posts, known=set(), now_ms=NOW, keep_minutes=keep_minutes, keep_hours=keep_hours)
        assert {k: dict(v) for k, v in inc.sketches.items()} == \
            {k: dict(v) for k, v in _reference_sketches(posts, NOW, keep_minutes, keep_hours).items()}
