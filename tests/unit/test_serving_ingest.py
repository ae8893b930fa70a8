"""Pure parts of ingestion and read answers: body decoding, per-record validation, spans, series steps."""

from __future__ import annotations

import pytest

from serving.errors import BadRequest
from serving.ingest import decode, validate
from serving.merge import Bucket, Segment
from serving.queries import spans, step_of
from trendcore.events import Engagement, Post
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
