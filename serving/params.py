"""Validation of the readers' parameters that FastAPI's types cannot express (region, tag, time range)."""

from __future__ import annotations

from serving.errors import BadRequest
from trendcore.hashtags import normalize_tag
from trendcore.regions import is_query_region
from trendcore.windows import DAY_MS, HOUR_MS, parse_day, parse_hour

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
    """An hour boundary (2026-11-29T19, 2026-11-29T19:00Z, 2026-11-29) as an epoch hour index; BadRequest
    naming `field` otherwise (the core's parse_hour says what is wrong)."""
    try:
        return parse_hour(raw)
    except ValueError as exc:
        raise BadRequest(f"{field}: {exc}") from None


def past_day(raw: str, now_ms: int) -> int:
    """A UTC day written as 2026-11-28, today or earlier, as a day index; BadRequest naming `day` otherwise."""
    try:
        day = parse_day(raw)
    except ValueError as exc:
        raise BadRequest(f"day: {exc}") from None
    if len(raw.strip()) != 10 or day > now_ms // DAY_MS:
        raise BadRequest(f"day: {raw!r} must be a UTC day such as 2026-11-28, not in the future")
    return day


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
