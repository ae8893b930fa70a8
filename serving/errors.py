"""The serving layer's own errors (plain TrendsErrors); routes turn them into HTTP answers."""

from __future__ import annotations

from trendcore.errors import TrendsError


class BadRequest(TrendsError):
    """A request parameter is wrong; the message says which and why (-> 422)."""


class TooLarge(TrendsError):
    """A request body is over the configured limit (-> 413)."""


class Unauthorized(TrendsError):
    """A write came without the right bearer token (-> 401)."""


class RateLimited(TrendsError):
    """A client wrote faster than allowed; `retry_after_s` says when to try again (-> 429)."""

    def __init__(self, retry_after_s: float) -> None:
        super().__init__(f"too many write requests: retry after {retry_after_s:.1f} s")
        self.retry_after_s = retry_after_s
