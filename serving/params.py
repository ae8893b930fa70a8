"""Validation of the readers' parameters that FastAPI's types cannot express (region, tag, time range)."""

from __future__ import annotations

from datetime import datetime, timezone

from trendcore.hashtags import normalize_tag
from trendcore.regions import is_query_region
from trendcore.windows import HOUR_MS
from serving.errors import BadRequest

MAX_K = 100
MAX_TAG_CHARS = 140
MAX_RANGE_HOURS = 31 * 24
REGION_PATTERN = "^(all|[A-Z]{2})$"
REGION_DOC = "'all' (worldwide) or an ISO 3166-1 alpha-2 code such as US"
TAG_DOC = "Any spelling: #Café, café, CAFÉ, full-width; normalised like ingestion. URL-encode '#' as %23."


def region_code(raw: str) -> str:
    """`all` or an upper-case ISO 3166-1 alpha-2 code; anything else is a BadRequest."""
    code = raw
    if not is_query_region(code):
        raise BadRequest(f"region: {raw!r} is not 'all' or an ISO 3166-1 alpha-2 code such as 'US'")
    return code


def tag_key(raw: str) -> str:
    """The counting key of a tag given in any spelling (#Café, café, full-width): ingestion's normalize_tag."""
    if len(raw) > MAX_TAG_CHARS:
        raise BadRequest(f"tag: {len(raw)} characters, at most {MAX_TAG_CHARS} allowed")
    key = normalize_tag(raw.strip())
    if not key or not any(ch.isalpha() for ch in key):
        raise BadRequest(f"tag: {raw!r} is not a hashtag (it needs at least one letter)")
    return key


def hour_bound(raw: str, field: str) -> int:
    """An hour boundary (2026-11-29T19, 2026-11-29T19:00Z, 2026-11-29) as an epoch hour index."""
    text = raw.strip().replace("z", "Z").removesuffix("Z")
    if len(text) == 10:
        text += "T00"
    if len(text) == 13:
        text += ":00"
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise BadRequest(f"{field}: {raw!r} is not a UTC hour such as 2026-11-29T19:00Z or a day such as 2026-11-29") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    millis = int(moment.timestamp() * 1000)
    if millis % HOUR_MS:
        raise BadRequest(f"{field}: {raw!r} is not on an hour boundary")
    return millis // HOUR_MS


def hour_range(start: str, end: str, now_ms: int) -> tuple[int, int]:
    """[from, to) as hour indexes: ordered, at most 31 days, not beyond the current hour."""
    first, last = hour_bound(start, "from"), hour_bound(end, "to")
    if last <= first:
        raise BadRequest("to: must be after from")
    if last - first > MAX_RANGE_HOURS:
        raise BadRequest(f"from/to: {last - first} hours, at most {MAX_RANGE_HOURS} (31 days) allowed")
    if last > now_ms // HOUR_MS + 1:
        raise BadRequest("to: is in the future (at most the end of the current hour)")
    return first, last
