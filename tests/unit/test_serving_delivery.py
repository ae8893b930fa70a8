"""A write's own delivery reports (the waiter), the verdict per record, the 503 wording, and the read budget."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis
from redis.backoff import ConstantBackoff

from adapters import redis as redis_io
from adapters.kafka import Report
from serving import delivery
from serving.delivery import BY_EVENT_ID, BY_POST_ID, Sent, Waiter
from serving.pools import Pools, ReadTimedOut
from trendcore.errors import ServiceError

POST = Sent(0, "p0", "posts", BY_POST_ID)
LIKE_WITH_ID = Sent(1, "p0", "engagements", BY_EVENT_ID)
LIKE = Sent(2, "p0", "engagements", None)
OK = Report("posts", 1, 42)
REFUSED = Report("posts", 1, -1, "Broker: Message size too large", maybe_written=False)
TIMED_OUT = Report("engagements", 1, -1, "Local: Message timed out", maybe_written=True)


def test_the_waiter_wakes_once_when_the_last_of_its_own_records_reports():
    woken: list[int] = []
    waiter = Waiter([POST, LIKE_WITH_ID, LIKE], lambda: woken.append(1))
    waiter.callback(0)(OK)
    waiter.callback(2)(OK)
    assert woken == [] and waiter.missing() == [1]
    waiter.callback(1)(OK)
    waiter.callback(1)(REFUSED)  # a second report of a record changes nothing, wakes nobody again
    assert woken == [1] and waiter.missing() == [] and waiter.reports()[1] == OK


def test_reports_from_many_threads_all_land_and_wake_once():
    sent = [Sent(i, f"p{i}", "posts", BY_POST_ID) for i in range(2000)]
    woken: list[int] = []
    waiter = Waiter(sent, lambda: woken.append(1))
    threads = [threading.Thread(target=lambda k=k: [waiter.callback(i)(OK) for i in range(k, 2000, 8)])
               for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert woken == [1] and len(waiter.reports()) == 2000


def test_each_record_is_written_not_written_or_unknown():
    result = delivery.outcome([POST, LIKE_WITH_ID, LIKE], {0: OK, 1: TIMED_OUT})
    assert [s.index for s, _ in result.written] == [0]
    assert [s.index for s, _ in result.unknown] == [1, 2]  # timed out: maybe stored; no report: unknown
    assert not result.complete
    refused = delivery.outcome([POST], {0: REFUSED})
    assert [s.index for s, _ in refused.not_written] == [0] and not refused.unknown


def test_all_written_is_complete():
    assert delivery.outcome([POST, LIKE], {0: OK, 2: OK}).complete


def test_retrying_is_called_safe_only_for_posts_and_engagements_with_an_event_id():
    posts_only = delivery.message(delivery.outcome([POST], {}), 5.0)
    assert "records with unknown outcome (no acknowledgement within 5 s)" in posts_only
    assert "retrying posts is safe" in posts_only and "engagement" not in posts_only
    bare = delivery.message(delivery.outcome([LIKE], {2: TIMED_OUT}), 5.0)
    assert "is safe" not in bare and "may count them twice" in bare
    named = delivery.message(delivery.outcome([LIKE_WITH_ID], {}), 5.0)
    assert "event_id is safe: both layers count an event_id once" in named
    body = delivery.body(delivery.outcome([POST, LIKE_WITH_ID, LIKE], {}), 5.0)
    assert [(u["index"], u["retry_safe"]) for u in body["unknown"]] == [(0, True), (1, True), (2, False)]


def test_records_kafka_refused_are_reported_not_written_and_safe_to_send_again():
    result = delivery.outcome([POST, LIKE], {0: OK, 2: Report("engagements", 0, -1, "Broker: Topic authorization "
                                                              "failed", maybe_written=False)})
    text = delivery.message(result, 5.0)
    assert text.startswith("Kafka: 1 of 2 records not written (first error: Broker: Topic authorization failed)")
    assert "1 of 2 written" in text and "not in Kafka: sending them again is safe" in text
    body = delivery.body(result, 5.0)
    assert [r["offset"] for r in body["records"]] == [42] and body["not_written"][0]["index"] == 2


def test_an_error_is_a_service_error_carrying_its_body():
    err = delivery.NotWritten(delivery.outcome([POST], {}), 1.0, "Kafka unreachable at 127.0.0.1:1")
    assert isinstance(err, ServiceError) and str(err) == err.body["detail"]
    assert "[last Kafka client error: Kafka unreachable at 127.0.0.1:1]" in str(err)


def _failing(calls: list[float]):
    def do():
        calls.append(time.monotonic())
        raise redis.ConnectionError("no answer")
    return do


def test_redis_retries_stop_at_the_threads_deadline():
    retry = redis_io.BudgetRetry(ConstantBackoff(0.1), retries=50)
    calls: list[float] = []
    started = time.monotonic()
    with pytest.raises(redis.ConnectionError), redis_io.deadline(started + 0.35):
        retry.call_with_retry(_failing(calls), lambda _e: None)
    assert time.monotonic() - started < 0.45 and 3 <= len(calls) <= 4


def test_without_a_deadline_every_retry_is_made():
    retry = redis_io.BudgetRetry(ConstantBackoff(0.0), retries=5)
    calls: list[float] = []
    with pytest.raises(redis.ConnectionError):
        retry.call_with_retry(_failing(calls), lambda _e: None)
    assert len(calls) == 6


def test_a_read_over_its_budget_answers_at_the_budget_and_fast_reads_pass():
    pools = Pools(read_threads=2, write_threads=1, read_budget_s=0.3)

    async def run() -> tuple[float, int]:
        started = time.monotonic()
        with pytest.raises(ReadTimedOut, match="did not answer in time"):
            await pools.read(time.sleep, 2.0)
        late = time.monotonic() - started
        return late, await pools.read(lambda: 7)

    late, value = asyncio.run(run())
    assert 0.25 <= late < 0.6 and value == 7


def test_reads_waiting_for_a_thread_spend_their_budget_too():
    """Two threads, both stalled: a third read answers at its budget, not after them."""
    pools = Pools(read_threads=2, write_threads=1, read_budget_s=0.3)

    async def run() -> list[float]:
        async def one() -> float:
            started = time.monotonic()
            with pytest.raises(ReadTimedOut):
                await pools.read(time.sleep, 1.0)
            return time.monotonic() - started
        return list(await asyncio.gather(one(), one(), one()))

    assert max(asyncio.run(run())) < 0.6


class _DeadRedis:
    """A client whose every GET fails, counting the attempts."""

    def __init__(self) -> None:
        self.gets = 0

    def get(self, _key):
        self.gets += 1
        raise redis.ConnectionError("no answer")


class _Count:
    def inc(self, n: int = 1) -> None:
        pass


def test_a_failed_trending_read_is_the_answer_for_a_moment_then_retried(monkeypatch):
    """The route after a failed fast path gets the error at once, not after a second read budget."""
    from serving import trending
    from serving.cache import TrendingCache
    from trendcore.keys import KeySpace

    monkeypatch.setattr(trending, "FAILED_READ_S", 0.2)
    client = _DeadRedis()
    reader = trending.TrendingReader(TrendingCache(1.0), client, KeySpace(), _Count(),
                                     Pools(read_threads=2, write_threads=1, read_budget_s=1.0))
    key = ("all", "1h", "volume", 10)

    async def attempts() -> None:
        for _ in range(2):
            with pytest.raises(ServiceError, match="Redis"):
                await reader.answer(key, None)
        assert client.gets == 1
        await asyncio.sleep(0.25)
        with pytest.raises(ServiceError):
            await reader.answer(key, None)
        assert client.gets == 2

    asyncio.run(attempts())
