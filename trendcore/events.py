"""The event contract: post and engagement records, and the one validation function.

Records are JSON objects keyed by `post_id` on Kafka. `parse_record` turns raw bytes into a
`Post` or `Engagement` or raises `InvalidRecord` naming the field and the reason; every consumer
(speed layer, archive, HTTP ingestion) uses it, so they all accept and refuse the same records.
"""

from __future__ import annotations

import reprlib
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import Annotated, Literal, NamedTuple

import msgspec
import orjson

from trendcore.errors import InvalidRecord
from trendcore.regions import ISO_3166_ALPHA2, is_region

SCHEMA_VERSION = 1
MAX_TEXT_CHARS = 1000
MAX_ID_CHARS = 64
ENGAGEMENT_KINDS = ("like", "view", "repost")
DEFAULT_MAX_FUTURE_MS = 5 * 60 * 1000
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# A refused value is quoted in the reason cut to 60 characters: a reason travels in dead letters
# and HTTP errors, and a 900 KB field must not make either too big to send.
_SHOW = reprlib.Repr()
_SHOW.maxstring = _SHOW.maxother = 60
_MS = timedelta(milliseconds=1)


class Post(NamedTuple):
    """A post as the contract defines it; `created_at_ms` is event time in UTC epoch milliseconds.

    Events are named tuples, not frozen dataclasses: as immutable, and built in a third of the time (a
    speed worker builds one per record)."""

    post_id: str
    user_id: str
    region: str
    text: str
    created_at_ms: int


class Engagement(NamedTuple):
    """A like, view or repost of a post, by event time; `event_id` (optional) names this engagement, so that
    copies of it (a retried write) count once."""

    post_id: str
    user_id: str
    kind: str
    region: str
    created_at_ms: int
    event_id: str | None = None


def parse_record(
    raw: bytes | str | None,
    expected_type: str | None,
    now_ms: int,
    max_future_ms: int = DEFAULT_MAX_FUTURE_MS,
) -> Post | Engagement:
    """Decode and validate one record; raise InvalidRecord saying which field is wrong and why.

    `expected_type` is "post" or "engagement" when the topic fixes it, None to accept either.
    `now_ms` is the caller's clock, used to refuse timestamps too far in the future. A Kafka
    tombstone (no value) is refused like any other record that is not an event.

    A record in exactly the contract's form (`_FAST`) is decoded and type-checked in one C pass; any
    other goes field by field (`validate_object`), which accepts or refuses it and says why.
    """
    if raw is None:
        raise InvalidRecord("", "empty value (tombstone)")
    fast = _FAST.get(expected_type)
    if fast is not None:
        try:
            wire = fast.decode(raw)
        except msgspec.MsgspecError:
            pass  # refused, or in a form the fast path leaves to the slow one ("v": 1.0, an extra field)
        else:
            return _from_wire(wire, now_ms, max_future_ms)
    return parse_fields(raw, expected_type, now_ms, max_future_ms)


def parse_fields(
    raw: bytes | str, expected_type: str | None, now_ms: int, max_future_ms: int = DEFAULT_MAX_FUTURE_MS
) -> Post | Engagement:
    """`parse_record` without its fast path: JSON, then `validate_object` field by field (its reference)."""
    try:
        obj = orjson.loads(raw)  # refuses invalid UTF-8 too; the decode below only names the byte
    except orjson.JSONDecodeError as exc:
        if isinstance(raw, bytes):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as bad:
                raise InvalidRecord("", f"not UTF-8 (byte {bad.start})") from None
        raise InvalidRecord("", f"not JSON ({exc.msg})") from None
    return validate_object(obj, expected_type, now_ms, max_future_ms)


def validate_object(
    obj: object, expected_type: str | None, now_ms: int, max_future_ms: int = DEFAULT_MAX_FUTURE_MS
) -> Post | Engagement:
    """Validate an already decoded record (as the HTTP API receives it).

    Fields are checked in a fixed order and the first wrong one is reported. Each check tests the common
    case inline (a speed worker validates every record) and leaves the reason to a helper."""
    if not isinstance(obj, dict):
        raise InvalidRecord("", f"expected a JSON object, got {type(obj).__name__}")
    get = obj.get
    version = get("v")
    if version != SCHEMA_VERSION:
        raise InvalidRecord("v", f"unsupported schema version {_SHOW.repr(version)} (expected {SCHEMA_VERSION})")
    kind = get("type")
    if kind not in ("post", "engagement"):
        raise InvalidRecord("type", f"must be 'post' or 'engagement', got {_SHOW.repr(kind)}")
    if expected_type is not None and kind != expected_type:
        raise InvalidRecord("type", f"a {kind} record on the {expected_type}s topic")
    post_id, user_id, region = get("post_id"), get("user_id"), get("region")
    if type(post_id) is not str or not 0 < len(post_id) <= MAX_ID_CHARS:
        post_id = _identifier(obj, "post_id")
    if type(user_id) is not str or not 0 < len(user_id) <= MAX_ID_CHARS:
        user_id = _identifier(obj, "user_id")
    if type(region) is not str or region not in ISO_3166_ALPHA2:
        _region(region)
    created = _timestamp(obj, now_ms, max_future_ms)
    if kind == "post":
        text = get("text")
        if type(text) is not str or len(text) > MAX_TEXT_CHARS:
            _text(obj, text)
        return Post(post_id, user_id, region, text, created)
    action = get("kind")
    if action not in ENGAGEMENT_KINDS:
        raise InvalidRecord("kind", f"must be one of {', '.join(ENGAGEMENT_KINDS)}, got {_SHOW.repr(action)}")
    event_id = _identifier(obj, "event_id") if get("event_id") is not None else None
    return Engagement(post_id, user_id, action, region, created, event_id)


def _region(region: object) -> None:
    if not is_region(region):
        raise InvalidRecord("region", f"{_SHOW.repr(region)} is not an ISO 3166-1 alpha-2 code such as 'US'")


def _text(obj: dict, text: object) -> None:
    if not isinstance(text, str):
        raise InvalidRecord("text", _missing_or_type(obj, "text", "a string"))
    if len(text) > MAX_TEXT_CHARS:
        raise InvalidRecord("text", f"{len(text)} characters, at most {MAX_TEXT_CHARS} allowed")


_Id = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ID_CHARS)]


class _PostWire(msgspec.Struct, forbid_unknown_fields=True):
    """A post exactly as the contract writes it: the fast path's form. Looser records (an extra field, `"v": 1.0`)
    are not refused here but left to `validate_object`; nothing it refuses passes here."""

    v: Literal[1]
    type: Literal["post"]
    post_id: _Id
    user_id: _Id
    region: str
    text: Annotated[str, msgspec.Meta(max_length=MAX_TEXT_CHARS)]
    created_at: str


class _EngagementWire(msgspec.Struct, forbid_unknown_fields=True):
    """An engagement exactly as the contract writes it (see _PostWire)."""

    v: Literal[1]
    type: Literal["engagement"]
    post_id: _Id
    user_id: _Id
    kind: Literal[ENGAGEMENT_KINDS]
    region: str
    created_at: str
    event_id: _Id | None = None


# Unknown fields are refused (left to the slow path), since msgspec skips them unchecked: an invalid
# UTF-8 byte or 1e400 there must still refuse the record as orjson does.
_FAST = {"post": msgspec.json.Decoder(_PostWire), "engagement": msgspec.json.Decoder(_EngagementWire)}


def _from_wire(wire: _PostWire | _EngagementWire, now_ms: int, max_future_ms: int) -> Post | Engagement:
    """The event of a record the fast path decoded: the checks left are the region and the timestamp (in the
    slow path's order: every field before them passed, and those after them too)."""
    if wire.region not in ISO_3166_ALPHA2:
        _region(wire.region)
    created = _checked_time(wire.created_at, now_ms, max_future_ms)
    if type(wire) is _PostWire:
        return Post(wire.post_id, wire.user_id, wire.region, wire.text, created)
    return Engagement(wire.post_id, wire.user_id, wire.kind, wire.region, created, wire.event_id)


def _missing_or_type(obj: dict, field: str, wanted: str) -> str:
    if field not in obj:
        return "missing"
    return f"must be {wanted}, got {type(obj[field]).__name__}"


def _identifier(obj: dict, field: str) -> str:
    value = obj.get(field)
    if not isinstance(value, str) or not value:
        raise InvalidRecord(field, _missing_or_type(obj, field, "a non-empty string") if value != "" else "empty")
    if len(value) > MAX_ID_CHARS:
        raise InvalidRecord(field, f"{len(value)} characters, at most {MAX_ID_CHARS} allowed")
    return value


def _timestamp(obj: dict, now_ms: int, max_future_ms: int) -> int:
    value = obj.get("created_at")
    if not isinstance(value, str):
        raise InvalidRecord("created_at", _missing_or_type(obj, "created_at", "an RFC 3339 string"))
    return _checked_time(value, now_ms, max_future_ms)


def _checked_time(value: str, now_ms: int, max_future_ms: int) -> int:
    millis = parse_timestamp(value)
    if millis > now_ms + max_future_ms:  # the reason names the value, not the clock: a replay's copy says the same
        raise InvalidRecord("created_at", f"{value} is more than {max_future_ms // 1000} s in the future")
    return millis


def parse_timestamp(value: str, field: str = "created_at") -> int:
    """An RFC 3339 timestamp with an offset (e.g. 2026-11-29T19:00:00Z) as UTC epoch milliseconds."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidRecord(field, f"{_SHOW.repr(value)} is not an RFC 3339 timestamp") from None
    if parsed.tzinfo is None:
        raise InvalidRecord(field, f"{_SHOW.repr(value)} has no UTC offset (use 'Z')")
    return (parsed - _EPOCH) // _MS


def format_time(millis: int) -> str:
    """Epoch milliseconds as the contract's RFC 3339 UTC string, e.g. 2026-11-29T19:00:00.000Z."""
    return _second_prefix(millis // 1000) + f"{millis % 1000:03d}Z"


@lru_cache(maxsize=4096)
def _second_prefix(second: int) -> str:
    return datetime.fromtimestamp(second, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.")


def post_record(post: Post) -> dict:
    """The wire form of a post."""
    return {
        "v": SCHEMA_VERSION,
        "type": "post",
        "post_id": post.post_id,
        "user_id": post.user_id,
        "region": post.region,
        "text": post.text,
        "created_at": format_time(post.created_at_ms),
    }


def engagement_record(eng: Engagement) -> dict:
    """The wire form of an engagement (`event_id` only when it has one: older consumers see the same record)."""
    wire = {
        "v": SCHEMA_VERSION,
        "type": "engagement",
        "post_id": eng.post_id,
        "user_id": eng.user_id,
        "kind": eng.kind,
        "region": eng.region,
        "created_at": format_time(eng.created_at_ms),
    }
    if eng.event_id is not None:
        wire["event_id"] = eng.event_id
    return wire
