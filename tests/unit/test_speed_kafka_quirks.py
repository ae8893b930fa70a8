"""speed/kafka_quirks.py: what the worker does about kafka-python's behaviours, driven without a broker.

`Consumer` stands in for kafka.KafkaConsumer's two calls used there; the behaviours it plays (a retriable
error from poll(), metadata that arrives late) are the ones the module's docstring names.
"""

from __future__ import annotations

import logging
import time

import pytest
from kafka.errors import KafkaConnectionError, UnsupportedVersionError
from kafka.net.selector import NetworkSelector

from speed import kafka_quirks
from speed.kafka_quirks import StallWatch
from trendcore.errors import ServiceError


class Consumer:
    """poll() answers or raises what it is given, in turn; partitions_for_topic() knows a topic after `late` asks."""

    def __init__(self, polls: list | None = None, late: int = 0) -> None:
        self.polls, self.late, self.asked = list(polls or []), late, 0

    def poll(self, timeout_ms: int, max_records: int) -> dict:
        answer = self.polls.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        self.asked += 1
        return {0, 1} if self.asked > self.late else None


class Clock:
    """A monotonic clock moved by hand (and by the sleeps it is given to)."""

    def __init__(self) -> None:
        self.now, self.slept = 0.0, []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_broker_that_is_down_makes_an_empty_poll_after_a_seconds_wait():
    clock = Clock()
    consumer = Consumer([KafkaConnectionError("down"), {"tp": ["r"]}])
    assert kafka_quirks.poll_or_wait(consumer, 200, 10, sleep=clock.sleep) == {}
    assert clock.slept == [1.0]
    assert kafka_quirks.poll_or_wait(consumer, 200, 10, sleep=clock.sleep) == {"tp": ["r"]}


def test_a_kafka_error_that_retrying_cannot_fix_stops_the_worker():
    with pytest.raises(UnsupportedVersionError):
        kafka_quirks.poll_or_wait(Consumer([UnsupportedVersionError("old broker")]), 200, 10, sleep=pytest.fail)


def test_a_rebalance_is_stalled_after_its_time_and_the_watch_rearms():
    clock = Clock()
    watch = StallWatch(30.0, clock)
    assert watch.stalled() is None  # nothing revoked
    watch.revoked()
    clock.now = 29.0
    assert watch.stalled() is None
    clock.now = 31.0
    assert watch.stalled() == 31.0
    assert watch.stalled() is None  # re-armed at the rejoin
    clock.now = 62.0
    assert watch.stalled() == 31.0  # the rejoin stalled too
    watch.assigned()
    clock.now = 500.0
    assert watch.stalled() is None


def test_the_stall_time_is_three_sessions_and_at_least_30_s():
    assert StallWatch.for_session(6_000).stall_s == 30.0
    assert StallWatch.for_session(45_000).stall_s == 135.0


def test_joining_waits_for_every_topics_metadata_and_names_a_topic_that_never_comes():
    clock = Clock()
    consumer = Consumer(late=3)
    kafka_quirks.await_metadata(consumer, ["posts", "engagements"], clock=clock, sleep=clock.sleep)
    assert clock.slept == [0.2, 0.2, 0.2] and consumer.asked == 5
    with pytest.raises(ServiceError, match="no metadata for topic posts after 1 s"):
        kafka_quirks.await_metadata(Consumer(late=10**9), ["posts"], timeout_s=1.0, clock=clock, sleep=clock.sleep)


def _blocking(seconds: float, answer: str) -> str:
    time.sleep(seconds)
    return answer


def _run_with_ticker(coro_fn) -> tuple[object, list[float]]:
    """Run `coro_fn` on a real kafka-python IO loop beside a task that ticks every 10 ms (as heartbeats would)."""
    net = NetworkSelector()
    ticks: list[float] = []
    finished = []

    async def ticker() -> None:
        while not finished:
            ticks.append(time.monotonic())
            await net.sleep(0.01)

    async def main():
        net.call_soon(ticker)
        try:
            return await coro_fn()
        finally:
            finished.append(True)

    try:
        return net.run(main), ticks
    finally:
        net.close()


def test_off_loop_keeps_the_io_loop_running_while_the_call_blocks():
    began = time.monotonic()
    result, ticks = _run_with_ticker(lambda: kafka_quirks.off_loop(_blocking, 0.4, "loaded"))
    assert result == "loaded" and time.monotonic() - began >= 0.4
    assert len(ticks) >= 15, f"the loop ran {len(ticks)} other steps while the call blocked"
    # a call made on the loop itself (what a sync listener does) would have starved the ticker
    _, starved = _run_with_ticker(_sync_on_the_loop)
    assert len(starved) <= 2


async def _sync_on_the_loop() -> str:
    return _blocking(0.4, "loaded")


def test_off_loop_raises_the_call_s_exception_in_the_listener():
    def fails() -> None:
        raise ServiceError("Redis: connection refused")

    with pytest.raises(ServiceError, match="connection refused"):
        _run_with_ticker(lambda: kafka_quirks.off_loop(fails))


def test_the_workers_io_loop_warns_about_a_step_from_a_second_on_not_from_a_tenth(caplog):
    async def step() -> None:
        time.sleep(0.3)  # a step that holds the loop, as a worker parsing records holds the GIL

    def warned(net: NetworkSelector) -> list[str]:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="kafka.net.selector"):
            net.run(step)
        return [r.getMessage() for r in caplog.records if "ran for" in r.getMessage()]

    client = kafka_quirks.net_client(bootstrap_servers="127.0.0.1:1")
    default = NetworkSelector()
    try:
        assert client._net.config["slow_task_threshold_secs"] == kafka_quirks.SLOW_IO_TASK_S == 1.0
        assert warned(client._net) == []
        assert len(warned(default)) == 1  # kafka-python's own 0.1 s: the warning the worker's log was full of
    finally:
        client.close()
        default.close()
