"""Prometheus metrics of the speed workers and the materializer (one registry per process)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

RECORDS = Counter("speed_records_consumed_total", "Records read from Kafka.", ["topic"])
MENTIONS = Counter("speed_mentions_applied_total", "Mentions (post, tag) added to the partitions' sketches.")
DUPLICATES = Counter("speed_duplicate_posts_total", "Posts skipped because their partition took their post id before.")
DEAD = Counter("speed_dead_letters_total", "Records sent to the dead-letter topic.", ["topic"])
LATE = Counter("speed_late_mentions_total",
               "Mentions too late for a bucket: 'minute' (still in the hour) or 'dropped'.", ["kind"])
REFUSED = Counter("speed_batches_refused_total",
                  "Checkpoints refused because the stored offset moved (a zombie, or a race with the new owner).")
REBUILDS = Counter("speed_rebuilds_total", "Times this worker noticed Redis lost data and replayed Kafka.")
STALLED_REBALANCES = Counter("speed_stalled_rebalances_total",
                             "Rebalances that never assigned partitions again, rejoined.")
OFFSETS_OUTSIDE_LOG = Counter("speed_offsets_outside_log_total", "Stored offsets moved to the log start because the "
                              "log no longer held them (retention deleted them, or the topic was recreated).",
                              ["topic", "partition"])
SKIPPED = Counter("speed_records_skipped_total", "Records deleted from Kafka before the worker took them.", ["topic"])
KAFKA_UNAVAILABLE = Counter("speed_kafka_unavailable_total",
                            "Polls that failed with a retriable Kafka error (broker down): retried after 1 s.")
ORPHANS = Counter("speed_orphan_engagements_total",
                  "Engaged posts a step found no state for (not held by the partition): left to the batch layer.")
BATCH = Histogram("speed_batch_records", "Records per partition micro-batch.",
                  buckets=(1, 10, 100, 500, 1000, 2500, 5000, 10_000, 20_000, 50_000))
FLUSH = Histogram("speed_flush_seconds", "Latency of one partition checkpoint step in Redis.",
                  buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
LAG = Gauge("speed_consumer_lag", "High watermark minus position, per partition.", ["topic", "partition"])
SNAPSHOT_AGE = Gauge("speed_snapshot_age_seconds", "Seconds since the last trending snapshot was written.")
SNAPSHOT_SECONDS = Histogram("speed_snapshot_seconds", "Time to compute and write all snapshots.",
                             buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10))


def serve(port: int, host: str = "127.0.0.1") -> None:
    """Expose /metrics on host:port (loopback by default; TRENDS_SPEED__METRICS_HOST opens it up)."""
    start_http_server(port, addr=host)
