"""The event contract: valid records parse, every kind of bad record is refused with its field."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trendcore.errors import InvalidRecord
from trendcore.events import (
    Engagement,
    Post,
    engagement_record,
    format_time,
    parse_fields,
    parse_record,
    parse_timestamp,
)

NOW = 1_795_982_400_000  # 2026-11-29T20:00:00Z
SCHEMAS = Path(__file__).parent.parent.parent / "docs" / "schemas"


def post(**changes) -> dict:
    record = {
        "v": 1, "type": "post", "post_id": "p1", "user_id": "u1", "region": "US",
        "text": "Go #WorldCup", "created_at": "2026-11-29T19:59:00.123Z",
    }
    record.update(changes)
    return {k: v for k, v in record.items() if v is not ...}


def engagement(**changes) -> dict:
    record = {
        "v": 1, "type": "engagement", "post_id": "p1", "user_id": "u2", "kind": "like",
        "region": "DE", "created_at": "2026-11-29T19:59:30Z",
    }
    record.update(changes)
    return {k: v for k, v in record.items() if v is not ...}


def test_valid_post_parses_to_epoch_ms():
    parsed = parse_record(orjson.dumps(post()), "post", NOW)
    assert parsed == Post("p1", "u1", "US", "Go #WorldCup", NOW - 60_000 + 123)


def test_valid_engagement_parses():
    parsed = parse_record(orjson.dumps(engagement()), "engagement", NOW)
    assert parsed == Engagement("p1", "u2", "like", "DE", NOW - 30_000)


def test_an_engagement_may_carry_an_event_id_and_keeps_it_on_the_wire():
    parsed = parse_record(orjson.dumps(engagement(event_id="e-1")), "engagement", NOW)
    assert parsed == Engagement("p1", "u2", "like", "DE", NOW - 30_000, "e-1")
    assert engagement_record(parsed)["event_id"] == "e-1"
    assert "event_id" not in engagement_record(parse_record(orjson.dumps(engagement()), None, NOW))  # old form kept


@pytest.mark.parametrize(("value", "reason"), [("", "empty"), (17, "must be a non-empty string"),
                                                ("e" * 65, "at most 64")])
def test_an_event_id_is_checked_like_a_post_id(value, reason):
    with pytest.raises(InvalidRecord, match=reason) as refused:
        parse_record(orjson.dumps(engagement(event_id=value)), "engagement", NOW)
    assert refused.value.field == "event_id"


def test_offsets_are_converted_to_utc():
    parsed = parse_record(orjson.dumps(post(created_at="2026-11-29T20:59:00.123+01:00")), None, NOW)
    assert parsed.created_at_ms == NOW - 60_000 + 123


@pytest.mark.parametrize(
    ("raw", "field", "reason"),
    [
        (b"{not json", "", "not JSON"),
        (b'{"text": "\xff\xfe"}', "", "not UTF-8"),
        (b"[1, 2]", "", "expected a JSON object"),
        (orjson.dumps(post(v=2)), "v", "unsupported schema version"),
        (orjson.dumps(post(type="like")), "type", "must be 'post' or 'engagement'"),
        (orjson.dumps(engagement()), "type", "on the posts topic"),
        (orjson.dumps(post(user_id=...)), "user_id", "missing"),
        (orjson.dumps(post(post_id=17)), "post_id", "must be a non-empty string, got int"),
        (orjson.dumps(post(post_id="")), "post_id", "empty"),
        (orjson.dumps(post(post_id="x" * 65)), "post_id", "at most 64"),
        (orjson.dumps(post(region="Atlantis")), "region", "not an ISO 3166-1"),
        (orjson.dumps(post(region="all")), "region", "not an ISO 3166-1"),
        (orjson.dumps(post(text=None)), "text", "must be a string"),
        (orjson.dumps(post(text="x" * 1001)), "text", "1001 characters, at most 1000"),
        (orjson.dumps(post(created_at=1234)), "created_at", "must be an RFC 3339 string"),
        (orjson.dumps(post(created_at="yesterday")), "created_at", "not an RFC 3339"),
        (orjson.dumps(post(created_at="2026-11-29T19:00:00")), "created_at", "no UTC offset"),
        (orjson.dumps(post(created_at="2026-12-01T00:00:00Z")), "created_at", "in the future"),
    ],
)
def test_bad_posts_say_which_field_and_why(raw, field, reason):
    with pytest.raises(InvalidRecord) as caught:
        parse_record(raw, "post", NOW)
    assert caught.value.field == field
    assert reason in str(caught.value)


def test_bad_engagement_kind():
    with pytest.raises(InvalidRecord, match="kind: must be one of like, view, repost"):
        parse_record(orjson.dumps(engagement(kind="love")), "engagement", NOW)


@pytest.mark.parametrize("field", ["v", "type", "region", "created_at"])
def test_a_huge_refused_value_is_quoted_short(field):
    """Reasons travel in dead letters and HTTP errors: a 900 KB field must not make them huge."""
    with pytest.raises(InvalidRecord) as caught:
        parse_record(orjson.dumps(post(**{field: "X" * 900_000})), "post", NOW)
    assert caught.value.field == field and "XXX...XXX" in str(caught.value) and len(str(caught.value)) < 200


def test_text_of_exactly_the_limit_is_valid():
    assert len(parse_record(orjson.dumps(post(text="y" * 1000)), "post", NOW).text) == 1000


def test_future_slack_is_configurable():
    raw = orjson.dumps(post(created_at="2026-11-29T20:04:00Z"))
    assert parse_record(raw, "post", NOW).created_at_ms == NOW + 240_000
    with pytest.raises(InvalidRecord):
        parse_record(raw, "post", NOW, max_future_ms=60_000)


def test_format_and_parse_round_trip():
    for millis in (0, NOW, NOW + 999, 1_700_000_000_001):
        assert parse_timestamp(format_time(millis)) == millis


@pytest.mark.parametrize(("name", "record"), [("post", post()), ("engagement", engagement()),
                                              ("engagement", engagement(event_id="e-1"))])
def test_wire_records_match_published_json_schema(name, record):
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    jsonschema.validate(record, schema)


# --- the fast path (msgspec) against the field-by-field checks ------------------------------------------

_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-2, 2), st.just(1.0), st.floats(allow_nan=False), st.text(max_size=8),
    st.sampled_from(["post", "engagement", "like", "view", "bad", "US", "us", "all", "", "x" * 64, "x" * 65,
                     "é" * 64, "é" * 65, "t" * 1000, "😀" * 1001, "2026-11-29T19:59:00Z", "2026-11-29T19:59:00",
                     "2026-11-29 19:59:00+00:00", "2026-11-29T21:00:00Z", "2026-13-29T19:59:00Z"]),
    st.lists(st.integers(-5, 5), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(-5, 5), max_size=1),
)
_FIELDS = ["v", "type", "post_id", "user_id", "region", "text", "created_at", "kind", "event_id", "extra"]


def _outcome(parse, raw: bytes, expected: str | None) -> tuple:
    try:
        return ("ok", parse(raw, expected, NOW))
    except InvalidRecord as exc:
        return ("refused", exc.field, str(exc))


@settings(max_examples=3000, deadline=None)
@given(base=st.sampled_from([post(), engagement()]), expected=st.sampled_from(["post", "engagement", None]),
       changes=st.dictionaries(st.sampled_from(_FIELDS), _VALUES | st.just(...), max_size=3))
def test_the_fast_path_accepts_and_refuses_exactly_as_the_field_checks(base, expected, changes):
    raw = orjson.dumps({k: v for k, v in {**base, **changes}.items() if v is not ...})
    assert _outcome(parse_record, raw, expected) == _outcome(parse_fields, raw, expected)


@pytest.mark.parametrize("raw", [
    b'{"v":1,"type":"post","post_id":"p","user_id":"u","region":"US","text":"#x","created_at":"%s","x":"\xff"}',
    b'{"v":1,"type":"post","post_id":"p","user_id":"u","region":"US","text":"#x","created_at":"%s","x":1e400}',
    b'{"v":1,"type":"post","post_id":"p","user_id":"u","region":"US","text":"#x","created_at":"%s","x":[]}',
    b'{"v":1,"type":"post","post_id":"p","user_id":"u","region":"US","text":"#x","created_at":"%s","type":"x"}',
    b'{"v":1,"type":"engagement","post_id":"p","user_id":"u","region":"US","text":"#x","created_at":"%s",'
    b'"type":"post"}',
    b'{"v":1,"type":"post","post_id":"p","post_id":"q","user_id":"u","region":"US","text":"#x","created_at":"%s"}',
    b'{"v":1,"type":"post","post_id":"\\ud800","user_id":"u","region":"US","text":"#x","created_at":"%s"}',
    b'{"v":1,"type":"post","post_id":"p","user_id":"u","region":"US","text":"a\\u0000\\/","created_at":"%s"}',
    b'\xef\xbb\xbf{"v":1,"type":"post","post_id":"p","user_id":"u","region":"US","text":"#x","created_at":"%s"}',
    b'{"v":1,"type":"post","post_id":"p","user_id":"u","region":"US","text":"#x","created_at":"%s"} ',
    b'{"v":1,"type":"engagement","post_id":"p","user_id":"u","kind":"like","region":"US","created_at":"%s",'
    b'"event_id":null}',
])
def test_records_json_reads_differently_get_the_field_checks_answer(raw):
    """Bytes msgspec could read apart from orjson: unknown fields it would skip unchecked, duplicate keys,
    escapes, a byte order mark."""
    raw = raw.replace(b"%s", b"2026-11-29T19:59:00Z")
    for expected in ("post", "engagement"):
        assert _outcome(parse_record, raw, expected) == _outcome(parse_fields, raw, expected)
