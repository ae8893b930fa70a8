"""Settings of the HTTP API (TRENDS_API__*)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


class ApiSettings(BaseModel):
    host: str = Field("127.0.0.1", description="Address the API binds.")
    port: int = Field(8700, description="Port of the API and dashboard.")
    workers: int = Field(
        2, ge=1, description="API server (granian) worker processes for `trends serve run` and the stack start.")
    token: str | None = Field(None, description="Bearer token required by write endpoints (POST).")
    token_file: Path | None = Field(None, description="File holding the bearer token (used when `token` is unset).")
    cache_ttl_s: float = Field(1.0, ge=0, le=1.0, description="How long GET /trending serves a snapshot from memory.")
    max_body_bytes: int = Field(1 << 20, ge=1024, description="Largest request body; larger gets 413.")
    max_batch: int = Field(1000, ge=1, description="Most records in one POST.")
    write_rate_per_s: float = Field(
        20.0, gt=0, description="Write requests per second per client (token bucket, per worker).")
    write_burst: int = Field(40, ge=1, description="Write requests a client may send at once before 429.")
    produce_timeout_s: float = Field(
        10.0, gt=0, description="How long a write waits for Kafka's acknowledgement of its own records; after it the "
        "503 says their outcome is unknown (librdkafka may still deliver them).")
    read_budget_s: float = Field(
        2.0, gt=0, description="Time budget of a read's Redis work, retries and waiting for a thread included; "
        "past it the read answers 503 saying Redis did not answer in time.")
    read_threads: int = Field(
        32, ge=1, description="Threads per worker for Redis reads; writes have their own (`write_threads`).")
    write_threads: int = Field(
        8, ge=1, description="Threads per worker that hand records to the Kafka producer (a write waits for its "
        "acknowledgements without holding one).")
    wait_timeout_s: float = Field(
        10.0, gt=0, description="How long ?wait=true waits for the speed layer to count a post.")
    stop_grace_s: int = Field(
        12, ge=1, le=1800, description="Seconds a stopping API worker gets to finish the requests in hand (a write "
        "waits up to `produce_timeout_s`, ?wait=true up to `wait_timeout_s`) before it is killed: without a limit "
        "granian's graceful stop waits for every client's idle keep-alive connection to close.")
    max_snapshot_age_s: float = Field(60.0, gt=0, description="/readyz fails when the worldwide 1h snapshot is older.")
    readiness_probe: str = Field("all:1h:volume", description="region:window:rank of the snapshot /readyz checks.")
