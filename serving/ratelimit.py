"""Per-client token buckets for write requests (in process: each server worker keeps its own)."""

from __future__ import annotations

import time

from serving.errors import RateLimited

_MAX_CLIENTS = 10_000


class TokenBuckets:
    """`rate` requests per second per client with bursts up to `burst`."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.buckets: dict[str, tuple[float, float]] = {}

    def take(self, client: str, now: float | None = None) -> None:
        """Spend one token or raise RateLimited with the seconds until the next token."""
        now = time.monotonic() if now is None else now
        tokens, last = self.buckets.get(client, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if tokens < 1.0:
            self.buckets[client] = (tokens, now)
            raise RateLimited((1.0 - tokens) / self.rate)
        if len(self.buckets) >= _MAX_CLIENTS and client not in self.buckets:
            self._forget_full(now)
        self.buckets[client] = (tokens - 1.0, now)

    def _forget_full(self, now: float) -> None:
        """Drop clients whose bucket has refilled: they are indistinguishable from new ones."""
        refill = self.burst / self.rate
        self.buckets = {c: (t, last) for c, (t, last) in self.buckets.items() if now - last < refill}
