"""Response models (for the OpenAPI spec and response validation) and the request-body schemas."""

from __future__ import annotations

from pydantic import BaseModel, Field

from trendcore.snapshot import Rebuilding, Snapshot

_REBUILDING = ("Not null while the speed layer replays partitions (after Redis lost its data, or a new owner "
               "far behind): its counts of the kept windows are low until it caught up.")


class TrendingAnswer(Snapshot):
    """GET /trending: the speed layer's snapshot (trendcore.snapshot) cut to `k` entries, with its age.

    Before the first snapshot the answer still comes, with null times, zero totals and no entries."""

    age_s: float | None = Field(description="Seconds since the snapshot was computed (null: no snapshot yet).")
    k: int = Field(description="Entries asked for; the list holds at most this many.")
    computed_at: str | None = Field(description="RFC 3339, UTC (null: no snapshot yet).")
    computed_at_ms: int | None = Field(description="Epoch ms (null: no snapshot yet).")


class Span(BaseModel):
    start: str
    end: str
    source: str = Field(description="exact (batch view), approx (sketch) or missing (no longer kept)")
    count: int


class CountAnswer(BaseModel):
    tag: str = Field(description="The counting key the given spelling normalises to.")
    display: str
    region: str
    window: str | None
    start: str
    end: str
    count: int = Field(description="Estimate; also the upper bound (a sketch never undercounts).")
    lower_bound: int
    upper_bound: int
    source: str = Field(description="exact, approx, mixed, or missing when nothing is kept")
    eps: float
    authors: int | None = Field(
        None, description="Distinct authors worldwide over the window's whole hours (HyperLogLog), at most "
        "`count`: the sketch covers whole hours and all regions.")
    spans: list[Span]
    rebuilding: Rebuilding | None = Field(None, description=_REBUILDING)


class PostOut(BaseModel):
    post_id: str
    score: float = Field(description="Weighted engagement (sort=top) or created_at in epoch ms (sort=recent).")
    text: str | None
    region: str | None
    user_id: str | None
    created_at: str | None


class PostsAnswer(BaseModel):
    tag: str
    sort: str
    source: str = Field(description="exact (batch layer's closed day) or approx (speed layer)")
    start: str
    end: str
    posts: list[PostOut]


class Point(BaseModel):
    start: str
    start_ms: int
    count: int
    lower_bound: int
    source: str


class SeriesAnswer(BaseModel):
    tag: str
    display: str
    region: str
    window: str
    step: str
    points: list[Point]
    rebuilding: Rebuilding | None = Field(None, description=_REBUILDING)


class RecordError(BaseModel):
    index: int
    field: str
    error: str


class Delivered(BaseModel):
    index: int
    post_id: str
    topic: str
    partition: int
    offset: int


class WriteAnswer(BaseModel):
    accepted: int
    rejected: int
    errors: list[RecordError]
    records: list[Delivered]
    counted: bool | None = Field(None, description="?wait=true: whether the speed layer counted every record in time.")
    message: str | None = None


class Undelivered(BaseModel):
    index: int
    post_id: str
    topic: str
    error: str | None = Field(None, description="The delivery error (null: no report within produce_timeout_s).")
    retry_safe: bool = Field(description="Sending it again cannot count it twice: a record not written, a post "
                             "(deduplicated by post_id) or an engagement with an event_id (see docs/api.md).")


class NotWrittenAnswer(BaseModel):
    """503 of a write: what happened to each valid record."""

    detail: str
    records: list[Delivered] = Field(description="Records Kafka stored (as in a 202).")
    not_written: list[Undelivered] = Field(description="Records Kafka reported as not stored.")
    unknown: list[Undelivered] = Field(description="Records whose outcome is unknown: Kafka may have stored them.")
    rejected: int
    errors: list[RecordError]


class Health(BaseModel):
    status: str
    checks: dict[str, str] = {}


_ID = {"type": "string", "minLength": 1, "maxLength": 64}
_COMMON = {
    "v": {"const": 1}, "post_id": _ID, "user_id": _ID,
    "region": {"type": "string", "pattern": "^[A-Z]{2}$"},
    "created_at": {"type": "string", "format": "date-time"},
}
POST_SCHEMA = {
    "type": "object", "required": ["v", "type", "post_id", "user_id", "region", "text", "created_at"],
    "properties": {**_COMMON, "type": {"const": "post"}, "text": {"type": "string", "maxLength": 1000}},
}
ENGAGEMENT_SCHEMA = {
    "type": "object", "required": ["v", "type", "post_id", "user_id", "kind", "region", "created_at"],
    "properties": {**_COMMON, "type": {"const": "engagement"}, "kind": {"enum": ["like", "view", "repost"]},
                   "event_id": {**_ID, "description": "Optional id of this engagement: copies count once "
                                "(batch layer; see docs/event-contract.md)"}},
}


def body_spec(schema: dict, description: str) -> dict:
    """openapi_extra for a route that reads its JSON body itself (to apply the event contract)."""
    content = {"application/json": {"schema": schema}}
    return {"requestBody": {"required": True, "description": description, "content": content}}


class Problem(BaseModel):
    """Every 4xx/503 answer: `detail` says what was wrong (a list of field errors for type mismatches)."""

    detail: str | list[dict]


def errors(*codes: int) -> dict:
    """OpenAPI `responses` for the error codes a route can answer."""
    text = {401: "Missing or wrong bearer token", 413: "Body over the limit", 422: "A parameter or the body is wrong",
            429: "Too many writes (see Retry-After)", 503: "Redis or Kafka unavailable"}
    return {code: {"model": Problem, "description": text[code]} for code in codes}
