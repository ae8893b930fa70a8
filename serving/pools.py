"""Threads for blocking work, by kind: Redis reads and Kafka hand-offs each have their own limiter, so reads never
queue behind writes; and a read's Redis work has a time budget (`api.read_budget_s`), after which the request
answers 503 whatever Redis does (a blackholed server would otherwise cost every retry's socket timeout)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import anyio
import anyio.to_thread

from adapters import redis as redis_io
from trendcore.errors import ServiceError

T = TypeVar("T")


class ReadTimedOut(ServiceError):
    """Redis did not answer a read within its budget."""

    def __init__(self, budget_s: float) -> None:
        super().__init__(f"Redis: did not answer in time (read budget {budget_s:g} s, TRENDS_API__READ_BUDGET_S); "
                         "retry later")


class Pools:
    """The read and write limiters of one app, made on first use inside the event loop."""

    def __init__(self, read_threads: int, write_threads: int, read_budget_s: float) -> None:
        self.sizes = {"read": read_threads, "write": write_threads}
        self.read_budget_s = read_budget_s
        self._limiters: dict[str, anyio.CapacityLimiter] = {}

    def limiter(self, kind: str) -> anyio.CapacityLimiter:
        """The limiter of `kind` ('read' or 'write')."""
        found = self._limiters.get(kind)
        if found is None:
            found = self._limiters[kind] = anyio.CapacityLimiter(self.sizes[kind])
        return found

    async def read(self, fn: Callable[..., T], *args: object) -> T:
        """`fn(*args)` on a read thread within the read budget (waiting for a thread included); ReadTimedOut after
        it. The thread is then abandoned: its Redis client stops retrying at the same deadline."""
        budget = self.read_budget_s
        at = time.monotonic() + budget
        with anyio.move_on_after(budget):
            return await anyio.to_thread.run_sync(_within, at, fn, *args, limiter=self.limiter("read"),
                                                  abandon_on_cancel=True)
        raise ReadTimedOut(budget)  # reached only when the budget cancelled the wait

    async def write(self, fn: Callable[..., T], *args: object) -> T:
        """`fn(*args)` on a write thread (handing records to the producer; it may wait while the queue is full)."""
        return await anyio.to_thread.run_sync(fn, *args, limiter=self.limiter("write"))


def _within(at: float, fn: Callable[..., T], *args: object) -> T:
    """Run `fn` with this thread's Redis deadline at `at` (not at all when the budget is already spent)."""
    if time.monotonic() >= at:
        raise ServiceError("Redis: the read budget was spent waiting for a thread")
    with redis_io.deadline(at):
        return fn(*args)
