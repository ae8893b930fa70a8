"""Send a generated stream to Kafka at a given rate, with a live progress bar."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from adapters import kafka as kafka_io
from trendcore.settings import Settings
from trends.gen.model import Stream


@dataclass
class GenResult:
    posts: int
    records: int
    seconds: float

    @property
    def posts_per_s(self) -> float:
        return self.posts / self.seconds if self.seconds else 0.0


def produce(
    stream: Stream,
    settings: Settings,
    count: int | None = None,
    duration_s: float | None = None,
    rate: float | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    producer=None,
) -> GenResult:
    """Produce posts until `count` posts or `duration_s` seconds (or Ctrl-C); pace at `rate` posts/s."""
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
    except KeyboardInterrupt:
        pass
    finally:
        with kafka_io.kafka_errors("flushing the producer"):
            producer.flush()
            if own:
                producer.close()
    if on_progress:
        on_progress(posts, records)
    return GenResult(posts, records, time.monotonic() - started)
