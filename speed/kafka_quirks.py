"""What the worker works around in kafka-python 3.0.12, apart from the loop so each is testable without a broker.

- `poll_or_wait`: poll() raises KafkaConnectionError while the broker is down (its coordinator look-up
  re-raises the failed metadata refresh); the worker waits for the broker instead of exiting.
- `StallWatch`: a join whose SyncGroup answer arrives after poll() timed out is dropped when the leader's
  assignment meanwhile cleared its metadata-change flag, so no assignment ever follows the revocation; the
  watch says when to leave and join again.
- `await_metadata`: a group leader that assigns without topic metadata hands out nothing and never
  rebalances again, so the worker learns every topic's partitions before it joins.
- `net_client`: the network client warns about any task of its IO loop that ran over 0.1 s; a worker parsing a
  step holds the GIL for longer than that, so under load the log got a warning every few seconds that named no
  fault. It warns from SLOW_IO_TASK_S on, still well inside a heartbeat interval.
- `off_loop`: rebalance listeners run on the IO thread that sends heartbeats; a listener that blocks there for
  longer than a session costs the member its partitions. It awaits its work running on a thread of its own,
  polling with the IO loop's own sleep (a kafka Future completed from another thread would not wake the loop).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from kafka.errors import KafkaError
from kafka.net.compat import KafkaNetClient
from kafka.net.selector import KernelEvent

from speed import metrics
from speed.logs import event
from trendcore.errors import ServiceError

log = logging.getLogger("speed.worker")

SLOW_IO_TASK_S = 1.0
"""A step of kafka-python's IO loop longer than this is logged as blocking it (kafka-python's own default: 0.1 s)."""


def net_client(**configs: Any) -> KafkaNetClient:
    """kafka-python's network client (a KafkaConsumer's `kafka_client`) warning about IO-loop steps longer than
    SLOW_IO_TASK_S."""
    return KafkaNetClient(**{**configs, "slow_task_threshold_secs": SLOW_IO_TASK_S})


class Polling(Protocol):
    """The consumer calls used here (kafka.KafkaConsumer's)."""

    def poll(self, timeout_ms: int, max_records: int) -> dict: ...

    def partitions_for_topic(self, topic: str) -> set[int] | None: ...


def poll_or_wait(consumer: Polling, timeout_ms: int, max_records: int,
                 sleep: Callable[[float], Any] = time.sleep) -> dict:
    """One poll; nothing, after a second's wait, when it raises a retriable Kafka error (the broker is down).
    Exactly once does not rest on such a poll leaving positions alone: a checkpoint from a moved position is
    refused by its offset check."""
    try:
        return consumer.poll(timeout_ms=timeout_ms, max_records=max_records)
    except KafkaError as exc:
        if not exc.retriable:
            raise
        metrics.KAFKA_UNAVAILABLE.inc()
        event(log, "kafka_unavailable", level=logging.WARNING, error=repr(exc))
        sleep(1.0)  # the broker is down: do not spin
        return {}


class StallWatch:
    """Times a rebalance from its revocation; says once per `stall_s` that it never completed."""

    def __init__(self, stall_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stall_s, self.clock = stall_s, clock
        self.since: float | None = None

    @classmethod
    def for_session(cls, session_timeout_ms: int) -> StallWatch:
        """Three session timeouts, at least 30 s: a join slower than that will not complete."""
        return cls(max(30.0, 3 * session_timeout_ms / 1000))

    def revoked(self) -> None:
        self.since = self.clock()

    def assigned(self) -> None:
        self.since = None

    def stalled(self) -> float | None:
        """Seconds since the revocation when they passed `stall_s` (and the watch re-armed, so a rejoin that
        stalls too is caught again), else None."""
        if self.since is None or self.clock() - self.since < self.stall_s:
            return None
        waited, self.since = self.clock() - self.since, self.clock()
        return waited


def await_metadata(consumer: Polling, topics: Iterable[str], timeout_s: float = 60.0,
                   clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], Any] = time.sleep) -> None:
    """Wait until the consumer knows every topic's partitions; ServiceError after `timeout_s`."""
    deadline = clock() + timeout_s
    for topic in topics:
        while not consumer.partitions_for_topic(topic):
            if clock() > deadline:
                raise ServiceError(f"Kafka: no metadata for topic {topic} after {timeout_s:.0f} s")
            sleep(0.2)


async def off_loop(call: Callable[..., Any], *args: Any, poll_s: float = 0.02) -> Any:
    """`call(*args)` on a thread of its own, awaited from a coroutine on kafka-python's IO loop, which keeps
    running meanwhile (heartbeats included); its result, or its exception raised here."""
    done, box = threading.Event(), {}

    def run() -> None:
        try:
            box["value"] = call(*args)
        except BaseException as exc:  # handed to the awaiting coroutine
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="rebalance-listener", daemon=True).start()
    while not done.is_set():
        await KernelEvent("_sleep", poll_s)  # the loop's own sleep (kafka.net.selector, 3.0.12)
    if "error" in box:
        raise box["error"]
    return box.get("value")
