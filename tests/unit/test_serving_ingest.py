"""Pure parts of ingestion and read answers: body decoding, per-record validation, spans, series steps."""

from __future__ import annotations

import pytest

from serving.errors import BadRequest
from serving.ingest import decode, validate
from serving.merge import Bucket, Segment
from serving.queries import ranked_lists, spans, step_of
from trendcore.events import Engagement, Post
from trendcore.post_lists import NewPost, TopPost, encode_posts, encode_top_posts
from trendcore.settings import Settings

NOW = 1_795_982_405_000
POST = {"v": 1, "type": "post", "post_id": "p1", "user_id": "u1", "region": "FR", "text": "#Café",
        "created_at": "2026-11-29T20:00:00Z"}
LIKE = {"v": 1, "type": "engagement", "post_id": "p1", "user_id": "u2", "kind": "like", "region": "FR",
        "created_at": "2026-11-29T20:00:01Z"}


def test_decode_accepts_one_post_only_where_allowed():
    assert decode(b'{"a": 1}', 10, single_allowed=True) == [{"a": 1}]
    with pytest.raises(BadRequest, match="JSON array"):
        decode(b'{"a": 1}', 10, single_allowed=False)


@pytest.mark.parametrize("body, needle", [(b"[", "malformed"), (b"[]", "empty"), (b"[1,2,3]", "at most 2"),
                                          (b"\xff", "malformed"), (b'"x"', "got str")])
def test_decode_refuses_bad_bodies(body, needle):
    with pytest.raises(BadRequest, match=needle):
        decode(body, 2, single_allowed=True)


def test_validate_splits_valid_records_from_errors_with_field_and_index():
    records = [POST, LIKE, {**POST, "created_at": "2026-11-29T21:00:00Z"}, "nope"]
    valid, errors = validate(records, None, NOW, Settings())
    assert [(i, type(r)) for i, r in valid] == [(0, Post), (1, Engagement)]
    assert [(e["index"], e["field"]) for e in errors] == [(2, "created_at"), (3, "")]
    assert "future" in errors[0]["error"]


def test_validate_refuses_engagements_on_the_posts_endpoint():
    _, errors = validate([LIKE], "post", NOW, Settings())
    assert errors[0]["field"] == "type"


def test_spans_merge_consecutive_segments_of_one_source():
    segs = [Segment(Bucket("h", 1), "exact", 2), Segment(Bucket("h", 2), "exact", 3),
            Segment(Bucket("h", 3), "approx", 4)]
    out = spans(segs)
    assert [(s["source"], s["count"]) for s in out] == [("exact", 5), ("approx", 4)]
    assert out[0]["end"] == out[1]["start"]


def test_series_steps_must_fit_the_window():
    assert step_of("24h", None) == ("1h", 3_600_000) and step_of("1h", "5m")[1] == 300_000
    for window, step in [("24h", "5m"), ("1h", "7m"), ("1h", "2h")]:
        with pytest.raises(BadRequest, match="step"):
            step_of(window, step)


def test_merged_post_lists_rank_like_the_sorted_sets_they_replace():
    """Top posts summed over the hours (a post sits in its own hour), newest by created ms, ties by the higher
    post id (ZUNION's order reversed), bodies from the entries."""
    hour_a = encode_top_posts([TopPost(5.0, 10, "b", "#x one", "US", "u1"), TopPost(5.0, 11, "a", "#x", "FR", "u2")])
    hour_b = encode_top_posts([TopPost(7.0, 3_600_010, "c", "#x c", "BR", "u3")])
    ranked = ranked_lists([hour_a, None, hour_b], "top", 2)
    assert [(e.post_id, score) for e, score in ranked] == [("c", 7.0), ("b", 5.0)]
    newest = ranked_lists([encode_posts([NewPost(10, "a", "#x", "US", "u")]),
                           encode_posts([NewPost(30, "b", "#x", "US", "u"), NewPost(10, "c", "#x", "US", "u")])],
                          "recent", 5)
    assert [(e.post_id, score) for e, score in newest] == [("b", 30.0), ("c", 10.0), ("a", 10.0)]
    assert ranked_lists([None, None], "top", 3) == []


async def _no_thread(fn, *args):
    return fn(*args)


class _Pools:
    read = staticmethod(_no_thread)


def test_wait_reads_the_merged_offsets(monkeypatch):
    """`?wait=true` returns once the merger merged past the record's offset."""
    import asyncio

    from serving import ingest, store
    from trendcore.keys import KeySpace

    merged = iter([[None], [5], [6]])
    asked = []

    def offsets(client, keys, parts):
        asked.append(parts)
        return next(merged)

    monkeypatch.setattr(store, "merged_offsets", offsets)
    monkeypatch.setattr(ingest, "POLL_S", 0)
    deliveries = [ingest.Delivery(0, "p", "posts", 2, 5)]
    assert asyncio.run(ingest.wait_counted(None, KeySpace(), deliveries, 5.0, _Pools()))
    assert asked == [[("posts", 2)]] * 3


def test_posts_of_a_published_day_take_their_bodies_from_the_merged_lists(monkeypatch):
    """A published day: ranked by the batch layer's list, bodies from the merger's newest and top lists where
    they still hold the post (none: null fields)."""
    from serving import queries, store
    from trendcore.keys import KeySpace
    from trendcore.windows import HOUR_MS

    space, day = KeySpace(), 20_000
    lists = {space.merged_new_posts("x", day * 24 + 1): encode_posts([NewPost(5, "a", "#x a", "US", "u1")]),
             space.merged_top_posts("x", day * 24 + 2): encode_top_posts([TopPost(3.0, 7, "b", "#x b", "FR", "u2")])}
    monkeypatch.setattr(store, "key_exists", lambda client, key: key == space.exact_top_posts("x", day))
    monkeypatch.setattr(store, "exact_posts", lambda client, key, k: [("b", 9.0), ("a", 4.0), ("gone", 1.0)])
    monkeypatch.setattr(store, "post_lists", lambda client, names: [lists.get(n) for n in names])
    answer = queries.posts(None, space, "x", 3, "top", day, (day + 2) * 24 * HOUR_MS)
    assert answer["source"] == "exact"
    assert [(p["post_id"], p["score"], p["text"], p["region"]) for p in answer["posts"]] == [
        ("b", 9.0, "#x b", "FR"), ("a", 4.0, "#x a", "US"), ("gone", 1.0, None, None)]


def _count_answer(monkeypatch, stored: dict[str, bytes], authors: int) -> dict:
    """GET /tags/{tag}/count's answer over a 1 h window whose every minute counts 1, the store stubbed out."""
    from serving import queries, store
    from serving.merge import window_plan
    from trendcore.keys import KeySpace

    class Client:
        def get(self, key):
            return stored.get(key)

    monkeypatch.setattr(store, "count_segments",
                        lambda client, keys, settings, region, tag, plan, now: [Segment(b, "approx", 1, 100)
                                                                                 for b in plan])
    monkeypatch.setattr(store, "display_name", lambda client, keys, tag, hours: tag)
    monkeypatch.setattr(store, "distinct_authors", lambda client, keys, tag, hours: authors)
    return queries.window_count(Client(), KeySpace(), Settings(), "x", "all", "1h", NOW) | {
        "plan": len(window_plan(NOW, "1h"))}


def test_count_answers_carry_the_rebuilding_summary(monkeypatch):
    from serving.schemas import CountAnswer
    from trendcore.keys import KeySpace

    summary = (b'{"partitions": [{"topic": "posts", "partition": 1, "from_offset": 0, "target_offset": 80, '
               b'"reached_offset": 20}], "progress": 0.25}')
    answer = _count_answer(monkeypatch, {KeySpace().rebuilding: summary}, authors=3)
    assert answer["rebuilding"]["progress"] == 0.25 and answer["rebuilding"]["partitions"][0]["partition"] == 1
    CountAnswer.model_validate({k: v for k, v in answer.items() if k != "plan"})
    assert _count_answer(monkeypatch, {}, authors=3)["rebuilding"] is None
    assert _count_answer(monkeypatch, {KeySpace().rebuilding: b"{bad"}, authors=3)["rebuilding"] is None


def test_count_answers_never_show_more_authors_than_the_count(monkeypatch):
    answer = _count_answer(monkeypatch, {}, authors=10_000)
    assert answer["count"] == answer["plan"] and answer["authors"] == answer["count"]
    assert _count_answer(monkeypatch, {}, authors=2)["authors"] == 2
