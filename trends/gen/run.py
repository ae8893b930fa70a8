"""Send a generated stream to Kafka at a given rate, with a live progress bar."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from adapters import kafka as kafka_io
from trendcore.settings import Settings
from trends.gen.model import Stream

STOP_FLUSH_S = 3.0
"""After Ctrl-C, how long the records already queued may still be delivered before the rest is dropped: a broker
that is gone must not hold the exit up (librdkafka would retry it until message.timeout.ms)."""


@dataclass
class GenResult:
    posts: int
    records: int
    seconds: float
    stopped: bool = False
    """Ctrl-C ended it (a normal end delivers everything or raises)."""
    undelivered: int = 0
    """Records sent to the producer but not delivered (failed, or dropped when stopped)."""
    reason: str | None = None
    """Why they were not delivered, in plain words (e.g. Kafka unreachable at its address)."""

    @property
    def posts_per_s(self) -> float:
        return self.posts / self.seconds if self.seconds else 0.0


def stop_line(result: GenResult) -> str:
    """The one line Ctrl-C prints: what was not delivered and why, or that everything was."""
    if not result.undelivered:
        return f"stopped: all {result.records:,} records delivered ({result.posts:,} posts in {result.seconds:.1f} s)"
    why = f" ({result.reason})" if result.reason else f" (not acknowledged within {STOP_FLUSH_S:g} s)"
    return f"stopped: {result.undelivered:,} of {result.records:,} records not delivered{why}"


def produce(
    stream: Stream,
    settings: Settings,
    count: int | None = None,
    duration_s: float | None = None,
    rate: float | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    producer: kafka_io.Producer | None = None,
) -> GenResult:
    """Produce posts until `count` posts or `duration_s` seconds, then deliver them all (ServiceError if not);
    or until Ctrl-C, then deliver what Kafka takes within STOP_FLUSH_S and count the rest. Pace at `rate` posts/s."""
    topics = {"posts": settings.kafka.posts_topic, "engagements": settings.kafka.engagements_topic}
    own = producer is None
    producer = producer or kafka_io.producer(settings.kafka)
    started = time.monotonic()
    posts = records = 0
    try:
        with kafka_io.kafka_errors("producing the generated stream"):
            for record in stream.records(count):
                producer.send(topics[record.topic], key=record.key, value=record.value)
                records += 1
                if record.kind != "post":
                    continue
                posts += 1
                if posts % 1000 == 0:
                    elapsed = time.monotonic() - started
                    if on_progress:
                        on_progress(posts, records)
                    if duration_s is not None and elapsed >= duration_s:
                        break
                    if rate:
                        ahead = posts / rate - elapsed
                        if ahead > 0:
                            time.sleep(ahead)
        with kafka_io.kafka_errors("flushing the producer"):
            producer.flush()
            if own:
                producer.close()
    except KeyboardInterrupt:  # also while the last records wait for a broker that is gone
        result = _stopped(producer, posts, records, started)
    except BaseException:
        producer.stop(STOP_FLUSH_S)  # the error says what went wrong: queued records must not hold it up
        raise
    else:
        result = GenResult(posts, records, time.monotonic() - started)
    if on_progress:
        on_progress(posts, records)
    return result


def _stopped(producer: kafka_io.Producer, posts: int, records: int, started: float) -> GenResult:
    """After Ctrl-C: deliver what Kafka takes within STOP_FLUSH_S, drop the rest, and say how many and why."""
    undelivered = producer.stop(STOP_FLUSH_S)
    reason = producer.reason() if undelivered else None
    return GenResult(posts, records, time.monotonic() - started, stopped=True, undelivered=undelivered, reason=reason)
