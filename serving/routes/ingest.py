"""POST /posts and POST /events: token, rate limit, size limit, contract validation, Kafka, optional wait."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from serving import ingest
from serving.delivery import NotWritten
from serving.deps import Services, ServicesDep, check_writer
from serving.errors import TooLarge
from serving.routes import http_errors, json_response
from serving.schemas import ENGAGEMENT_SCHEMA, POST_SCHEMA, NotWrittenAnswer, WriteAnswer, body_spec, errors
from trendcore.errors import ServiceError

router = APIRouter(tags=["write"])
_BEARER = HTTPBearer(auto_error=False, description="The API token (`trends serve token` prints the local stack's)")
Bearer = Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)]
WAIT_DOC = "Return once the speed layer has counted the records (read-your-own-writes), or say it timed out."
_POSTS_BODY = body_spec({"oneOf": [POST_SCHEMA, {"type": "array", "items": POST_SCHEMA, "minItems": 1}]},
                        "One post or an array of posts.")
_EVENTS_BODY = body_spec({"type": "array", "minItems": 1, "items": {"oneOf": [POST_SCHEMA, ENGAGEMENT_SCHEMA]}},
                         "An array of posts and engagements.")
_WRITE_ERRORS = {**errors(401, 413, 429),
                 422: {"model": WriteAnswer, "description": "No record passed the contract, or the body is malformed"},
                 503: {"model": NotWrittenAnswer, "description": "Kafka did not store every record, or did not say in "
                       "time: per record, written, not written or unknown, and whether retrying it is safe"}}
Wait = Annotated[bool, Query(description=WAIT_DOC)]


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, refusing more than `limit` bytes (declared or streamed) with TooLarge."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise TooLarge(f"body: {int(declared)} bytes, at most {limit} allowed")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"body: over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _write(request: Request, svc: Services, expected: str | None, wait: bool) -> Response:
    """The shared write path of both endpoints; 202 when any record was accepted, 422 when none."""
    with http_errors():
        check_writer(request, svc)
        body = await _read_body(request, svc.settings.api.max_body_bytes)
        records = ingest.decode(body, svc.settings.api.max_batch, single_allowed=expected == "post")
        valid, errors = ingest.validate(records, expected, int(time.time() * 1000), svc.settings)
        svc.metrics.rejected.inc(len(errors))
        answer = {"accepted": 0, "rejected": len(errors), "errors": errors, "records": [], "counted": None,
                  "message": None}
        if not valid:
            return json_response({**answer, "message": "no record passed the event contract"}, status_code=422)
        try:
            deliveries = await ingest.produce(svc.producer(), svc.pools, svc.settings, valid)
        except NotWritten as exc:
            for topic in (r["topic"] for r in exc.body["records"]):
                svc.metrics.produced.labels(topic).inc()
            return json_response({**exc.body, "rejected": len(errors), "errors": errors}, status_code=503)
        for d in deliveries:
            svc.metrics.produced.labels(d.topic).inc()
        answer.update(accepted=len(deliveries), records=[_delivery(d) for d in deliveries])
        if wait:
            await _wait(svc, deliveries, answer)
    return json_response(answer, status_code=202)


def _delivery(d: ingest.Delivery) -> dict:
    return {"index": d.index, "post_id": d.post_id, "topic": d.topic, "partition": d.partition, "offset": d.offset}


async def _wait(svc: Services, deliveries: list[ingest.Delivery], answer: dict) -> None:
    """Fill `counted` and `message` after waiting for the speed layer's merged offsets."""
    timeout = svc.settings.api.wait_timeout_s
    try:
        counted = await ingest.wait_counted(svc.redis, svc.keys, deliveries, timeout, svc.pools)
    except ServiceError as exc:
        answer.update(counted=False,
                      message=f"accepted and stored in Kafka, but whether it was counted is unknown: {exc}")
        return
    answer["counted"] = counted
    if not counted:
        answer["message"] = (f"accepted and stored in Kafka, but the speed layer (group {svc.settings.speed.group!r}) "
                             f"had not counted it after {timeout:g} s; "
                             "it will be counted when the speed layer catches up")


@router.post("/posts", status_code=202, response_model=WriteAnswer, responses=_WRITE_ERRORS,
             openapi_extra=_POSTS_BODY, summary="Publish posts")
async def post_posts(request: Request, svc: ServicesDep, _auth: Bearer, wait: Wait = False) -> Response:
    """One post or a batch, validated with the event contract and produced to the posts topic."""
    return await _write(request, svc, "post", wait)


@router.post("/events", status_code=202, response_model=WriteAnswer, responses=_WRITE_ERRORS,
             openapi_extra=_EVENTS_BODY, summary="Publish posts and engagements")
async def post_events(request: Request, svc: ServicesDep, _auth: Bearer, wait: Wait = False) -> Response:
    """A batch of posts and engagements, each to its topic, keyed by post id."""
    return await _write(request, svc, None, wait)
