"""Batch job status and speed-vs-exact drift reach /metrics under the names the alert rules use."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from adapters import redis as redis_io
from serving.app import create_app
from trendcore import keys

pytestmark = pytest.mark.integration


def test_metrics_export_batch_status_and_drift_from_redis(stack):
    own = stack.model_copy(deep=True)
    own.redis.url = stack.redis.url.rsplit("/", 1)[0] + "/6"
    client = redis_io.client(own.redis)
    client.flushdb()
    client.hset(keys.BATCH_STATUS, mapping={"hourly:last_success_ms": 1_795_982_400_000, "hourly:failures": 2})
    client.hset(keys.ACCURACY, mapping={"US": 0.25, "all": 1.5, "US:undercounts": 3, "DE:sketch_missing": 1})
    with TestClient(create_app(own)) as api:
        text = api.get("/metrics").text
    assert 'trends_batch_last_success_timestamp_seconds{job="hourly"} 1.7959824e+09' in text
    assert 'trends_batch_failures_total{job="hourly"} 2.0' in text
    assert 'trends_speed_error_ratio{region="all"} 1.5' in text
    assert 'trends_speed_error_ratio{region="US"} 0.25' in text
    assert 'trends_speed_undercounts{region="US"} 3.0' in text
    assert 'trends_speed_sketch_missing{region="DE"} 1.0' in text
    assert 'region="US:undercounts"' not in text
    client.flushdb()


def test_batch_jobs_record_their_outcome_and_the_drift(stack):
    from batch.status import record_drift, recorded

    own = stack.model_copy(deep=True)
    own.redis.url = stack.redis.url.rsplit("/", 1)[0] + "/7"
    client = redis_io.client(own.redis)
    client.flushdb()
    with recorded(own, "hourly"):
        pass
    with pytest.raises(RuntimeError), recorded(own, "daily"):
        raise RuntimeError("boom")
    status = client.hgetall(keys.BATCH_STATUS)
    assert int(status[b"hourly:last_success_ms"]) > 1_700_000_000_000
    assert status[b"daily:failures"] == b"1" and b"daily:last_success_ms" not in status
    # rows as batch.accuracy.compare: (hour, region, exact_total, speed_total, eps, bound, checked, max_error, ...)
    rows = [(10, "US", 100, 100, 0.01, 4, 5, 2, 0.5, 1.0, 0, 1.0, "candidates", True),
            (11, "US", 100, 100, 0.01, 4, 5, 6, 0.5, 0.8, 0, 1.0, "candidates", True),
            (11, "DE", 50, None, 0.01, None, 0, None, None, None, None, None, None, False)]
    record_drift(own, rows)
    assert client.hgetall(keys.ACCURACY) == {b"US": b"1.5", b"US:undercounts": b"0", b"US:sketch_missing": b"0"}
    client.flushdb()
