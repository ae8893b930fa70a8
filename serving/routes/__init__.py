"""Thin HTTP routes. `http_errors` is the one place our errors become HTTP status codes."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import orjson
from fastapi import HTTPException, Response

from serving.errors import BadRequest, RateLimited, TooLarge, Unauthorized
from trendcore.errors import InvalidRecord, ServiceError


@contextmanager
def http_errors() -> Iterator[None]:
    """Map serving and core errors to 4xx (the caller's fault) or 503 (a dependency is down)."""
    try:
        yield
    except (BadRequest, InvalidRecord) as exc:
        raise HTTPException(422, str(exc)) from exc
    except TooLarge as exc:
        raise HTTPException(413, str(exc)) from exc
    except Unauthorized as exc:
        raise HTTPException(401, str(exc), headers={"WWW-Authenticate": "Bearer"}) from exc
    except RateLimited as exc:
        raise HTTPException(429, str(exc), headers={"Retry-After": str(max(1, math.ceil(exc.retry_after_s)))}) from exc
    except ServiceError as exc:
        raise HTTPException(503, str(exc)) from exc


def json_response(doc: object, status_code: int = 200) -> Response:
    """A JSON answer serialised once with orjson."""
    return Response(orjson.dumps(doc), status_code=status_code, media_type="application/json")
