"""Settings of the speed layer (TRENDS_SPEED__*)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class SpeedSettings(BaseModel):
    group: str = Field("trends-speed", description="Kafka consumer group of the speed workers.")
    flush_every_s: float = Field(
        1.0, gt=0, le=60, description="Longest time between two checkpoints of a partition: each worker keeps its "
        "partitions' open buckets in memory and writes their changes with the partition's next offset in one atomic "
        "step, at the first poll after each multiple of this on the wall clock (a partition with nothing new is not "
        "written; docs/speed.md).")
    seen_post_ids: int = Field(
        100_000, ge=0, description="Post ids each partition remembers (checkpointed with its "
        "state) to count a re-sent post once; a duplicate of an older post counts twice (the batch layer is exact).")
    seen_event_ids: int = Field(
        100_000, ge=0, description="Engagement event ids each partition remembers (checkpointed "
        "with its state) so that a copy adds its weight once; a copy of an older one adds it again, to a post still "
        "held in a list (the batch layer is exact).")
    rebuild_lag_records: int = Field(
        50_000, ge=0, description="A partition positioned from its checkpoint with more records "
        "than this between it and the log's end is `rebuilding` (snapshots and count answers say so, with the "
        "replay's progress) until it reaches that end; one positioned with no checkpoint (Redis lost its data, or a "
        "first start) is rebuilding whenever it has records to replay.")
    rebuild_flag_ttl_s: int = Field(
        120, ge=10, description="TTL of a replaying partition's marker (rewritten at each of its "
        "checkpoints) and of the merger's `rebuilding` summary (rewritten every round): how long the flag outlives "
        "a worker or materializer that died.")
    workers: int = Field(2, ge=1, description="Workers `trends up` starts locally.")
    metrics_host: str = Field(
        "127.0.0.1", description="Address the Prometheus endpoints bind (0.0.0.0 to be scraped from elsewhere).")
    metrics_port: int = Field(9108, description="Prometheus port of the first local worker (next ones +1).")
    materializer_port: int = Field(9107, description="Prometheus port of the materializer.")
    materialize_every_s: float = Field(
        2.0, gt=0, description="Seconds between the merges and trending snapshots (rounds start at its multiples "
        "on the wall clock, plus materialize_lag_s). Freshness (produce -> answer) is at most about flush_every_s + "
        "this + a round's own time: 2 s keeps its p99 near 4 s at 15,000 posts/s on 2 cores; 5 s made it 8.5 s "
        "(docs/benchmarks.md).")
    materialize_lag_s: float = Field(
        0.4, ge=0, description="Rounds start this long after a multiple of materialize_every_s on the wall clock; "
        "workers checkpoint just after each multiple of flush_every_s, so a round takes the checkpoints just written "
        "instead of waiting up to a whole period for them (at 15,000 posts/s they land 0.1-0.3 s after it).")
    max_batch_records: int = Field(20_000, ge=1, description="Records fetched per poll (micro-batch upper size).")
    max_step_records: int = Field(
        5_000, ge=1,
        description="Records parsed and aggregated at a time (bounds the memory of one step's intermediate results).",
    )
    poll_timeout_ms: int = Field(200, ge=1, description="How long a poll waits for records.")
    fetch_min_bytes: int = Field(
        256 * 1024, ge=1, description="Kafka fetch: bytes the broker gathers before answering (fewer, larger fetches)."
    )
    fetch_max_wait_ms: int = Field(
        500, ge=0, description="Kafka fetch: longest the broker waits for fetch_min_bytes (bounds the added latency). "
        "At low rates it sets the micro-batch size: a longer wait makes fewer, larger steps."
    )
    max_partition_fetch_bytes: int = Field(
        4 * 1024 * 1024, ge=1024, description="Kafka fetch: bytes per partition per fetch.")
    check_crcs: bool = Field(
        True, description="Verify record CRC32C on consume (cheap with the crc32c package, pure Python without it)."
    )
    lean_records: bool = Field(
        True, description="Decode fetched records straight from kafka-python's batches into (offset, key, value) "
        "instead of its per-record objects: less than half the consume CPU (speed/lean_records.py). false: the stock "
        "decoding, should a kafka-python upgrade change what it reads."
    )
    gc_threshold: int = Field(
        50_000, ge=700, description="Allocations between young-generation collections of the worker's cyclic garbage "
        "collector (Python's default is 700). A step allocates hundreds of thousands of short-lived objects; with the "
        "default, full collections over the long-lived ones dominate the worker's Python time."
    )
    session_timeout_ms: int = Field(10_000, ge=1000, description="Kafka group session timeout.")
    heartbeat_ms: int = Field(3_000, ge=100, description="Kafka group heartbeat interval.")
    keep_minutes: int = Field(
        120, ge=60, description="Minute buckets kept (TTL); older events skip the minute sketches.")
    keep_hours: int = Field(26, ge=25, description="Hour buckets kept (TTL); older events are left to the batch layer.")
    candidates: int = Field(500, ge=100, description="Candidate tags kept per bucket (sorted set trim).")
    rescore: int = Field(300, ge=100, description="Candidates re-scored with the sketches per window.")
    materializer_cache_sketches: int = Field(
        2_000, ge=0, description="Sketches the materializer keeps between rounds (about 54 KB each at the default eps; "
        "2,000 covers 10 regions + all): a bucket is read again only when its total changed.")
    top_k: int = Field(100, ge=1, description="Entries per trending list.")
    posts_per_tag: int = Field(20, ge=1, description="Top and newest posts kept per tag and hour.")
    post_ttl_s: int = Field(26 * 3600, ge=60, description="TTL of a partition's chunks of seen post and event ids "
                             "(a safety net: the oldest chunks are deleted by count, `seen_post_ids`).")
    min_authors: int = Field(3, ge=0, description="Distinct authors a tag needs to trend.")
    rise_min_count: int = Field(10, ge=0, description="Count a tag needs to enter the rise list.")
    rise_a: float = Field(5.0, description="Rise score smoothing: (count + a) / (baseline + b).")
    rise_b: float = Field(10.0, description="Rise score smoothing: (count + a) / (baseline + b).")
    weight_view: float = Field(1.0, description="Engagement weight of a view.")
    weight_like: float = Field(10.0, description="Engagement weight of a like.")
    weight_repost: float = Field(20.0, description="Engagement weight of a repost.")
    snapshot_ttl_s: int = Field(600, ge=10, description="TTL of trending snapshots.")

    def engagement_weights(self) -> dict[str, float]:
        """Weight of each engagement kind in a post's score (the speed layer's top posts)."""
        return {"view": self.weight_view, "like": self.weight_like, "repost": self.weight_repost}

    def consumer_tuning(self) -> dict[str, object]:
        """kafka-python fetch options of a speed worker; the benchmark's ceiling uses the same ones."""
        return {
            "max_poll_records": self.max_batch_records,
            "fetch_min_bytes": self.fetch_min_bytes,
            "fetch_max_wait_ms": self.fetch_max_wait_ms,
            "max_partition_fetch_bytes": self.max_partition_fetch_bytes,
            "fetch_max_bytes": 64 * 1024 * 1024,
            "check_crcs": self.check_crcs,
        }
