"""Every Kafka client over the session broker's SASL_SSL listener (SCRAM-SHA-512 as the stack's user, TLS with the
CA the stack made at start): the speed layer's exactly-once counting, the archive on Spark, POST /posts, topic
creation with the configured replication; and a wrong password, named as Kafka authentication by the adapter,
/readyz, the API and the speed worker's command line."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import orjson
import pytest
from pydantic import SecretStr

from adapters import kafka as kafka_io
from batch import archive, delta, tables
from batch.tables import Lake
from tests.integration.test_api_writes import AUTH, make_api, post, read_back
from tests.integration.test_batch import isolated
from tests.integration.test_speed import TRENDS, _lane, assert_cells_match, make_stream
from trendcore.errors import ServiceError, StackError
from trendcore.settings import Settings, to_env
from trends.gen.model import GenConfig, Stream
from trends.gen.run import produce
from trends.stack import kafka as kafka_stack

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def secure(stack: Settings) -> Settings:
    """The session settings with every Kafka client pointed at the SASL_SSL listener of the session broker."""
    return stack.model_copy(update={"kafka": kafka_stack.sasl_client_settings(stack)})


def kafka_env(settings: Settings) -> dict[str, str]:
    """The TRENDS_KAFKA__ variables of `settings`, password included, for a process we start."""
    return {name: value for name, value in to_env(settings).items() if name.startswith("TRENDS_KAFKA__")}


def with_password(settings: Settings, password: str) -> Settings:
    return settings.model_copy(update={"kafka": settings.kafka.model_copy(
        update={"sasl_password": SecretStr(password)})})


def test_the_stack_listener_is_sasl_ssl_with_the_stack_ca(secure):
    client = secure.kafka.client
    assert client["security.protocol"] == "SASL_SSL" and client["sasl.mechanism"] == "SCRAM-SHA-512"
    assert Path(client["ssl.ca.location"]).is_file()
    plaintext = secure.kafka.model_copy(update={"client": {}, "sasl_password": None})
    with pytest.raises(ServiceError):  # the SASL_SSL port speaks nothing else
        kafka_io.ping(plaintext, 1.0)


def test_speed_layer_counts_every_cell_exactly_over_sasl_ssl(secure, tmp_path):
    gen = _lane(secure, tmp_path)  # its topics are created over SASL_SSL too
    lane = next(gen)
    try:
        stream = make_stream(20, 500, seed=25, duplicate_share=0.02, late_share=0.05, engagements_per_post=1.0)
        lane.start_worker(0, **kafka_env(lane.settings))
        lane.produce(stream, 4000)
        lane.wait_applied(90)
        assert assert_cells_match(lane, stream) >= 4 * 2
    finally:
        gen.close()


def test_archive_lands_every_record_over_sasl_ssl(secure, spark):
    own = isolated(secure, f"sasl-{int(time.time())}", redis_db=7)
    kafka_io.ensure_topics(own.kafka)
    now = int(time.time() * 1000)
    stream = Stream(GenConfig(seed=0x5A51, start_ms=now - 600_000, event_rate=1.0, vocabulary=500, wall_now_ms=now))
    produce(stream, own, count=300)
    result = archive.run(spark, own)
    truth, lake = stream.truth, Lake.of(own)
    assert result.records > 300
    assert delta.read(spark, lake, tables.BRONZE_POSTS).count() == truth.posts + truth.duplicates
    assert delta.read(spark, lake, tables.BRONZE_ENGAGEMENTS).count() == truth.engagement_count


def test_post_is_written_over_sasl_ssl_and_readyz_says_ok(secure):
    with make_api(secure) as api:
        record = post()
        reply = api.post("/posts", json=record, headers=AUTH)
        assert reply.status_code == 202, reply.text
        where = reply.json()["records"][0]
        value = orjson.loads(read_back(secure, where["topic"], where["partition"], where["offset"]))
        assert value["post_id"] == record["post_id"]
        assert api.get("/readyz").json()["checks"]["kafka"] == "ok"


def test_create_topics_command_applies_replication_insync_replicas_and_retention(secure):
    stamp = int(time.time())
    kafka = secure.kafka.model_copy(update={"posts_topic": f"sasl-p-{stamp}", "engagements_topic": f"sasl-e-{stamp}",
                                            "dead_letter_topic": f"sasl-d-{stamp}", "partitions": 2,
                                            "retention_ms": 90_000_000})
    env = {**os.environ, **to_env(secure.model_copy(update={"kafka": kafka}))}
    made = subprocess.run([TRENDS, "kafka", "create-topics"], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert made.returncode == 0 and "created topics" in made.stderr and "replication factor 1" in made.stderr, made
    assert kafka_io.ensure_topics(kafka) == []  # idempotent: existing topics are left as they are
    from kafka.admin import ConfigResource, ConfigResourceType

    with kafka_io.admin_client(kafka, "reading topic configs") as admin:
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, kafka.posts_topic)])
        partitions = admin.describe_topics([kafka.posts_topic])[0]["partitions"]
    text = str(described)
    assert "retention.ms" in text and "90000000" in text and "min.insync.replicas" in text
    assert len(partitions) == 2 and all(p["replica_nodes"] == [1] for p in partitions)


def test_a_wrong_password_is_named_kafka_authentication(secure, tmp_path):
    bad = with_password(secure, "not-the-password")
    with pytest.raises(ServiceError, match=r"Kafka authentication failed at .*SCRAM-SHA-512 as user 'trends'") as err:
        kafka_io.consumer(bad.kafka)
    assert "not-the-password" not in str(err.value)
    with make_api(bad, produce_timeout_s=20.0) as api:
        checks = api.get("/readyz").json()["checks"]
        assert checks["kafka"].startswith("authentication failed at "), checks
        started = time.monotonic()
        reply = api.post("/posts", json=post(), headers=AUTH)
        assert reply.status_code == 503 and "Kafka authentication failed" in reply.json()["detail"], reply.text
        assert time.monotonic() - started < 15, "the refusal should end the wait, not the produce timeout"
    env = {**os.environ, **to_env(bad), "TRENDS_SPEED__METRICS_PORT": str(secure.speed.metrics_port + 97)}
    worker = subprocess.run([TRENDS, "speed", "run"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert worker.returncode == 1 and "Kafka authentication failed" in worker.stdout + worker.stderr, worker


def test_trends_up_against_an_external_kafka_names_a_wrong_password(secure, tmp_path):
    """`trends up` with TRENDS_STACK__INFRA=external authenticates before it starts anything."""
    from trends.stack import manager

    external = with_password(secure, "not-the-password").model_copy(deep=True)
    external.stack.infra, external.stack.home = "external", tmp_path
    with pytest.raises(StackError, match="Kafka authentication failed") as refused:
        manager.up(external, names=["kafka"], log=lambda _m: None)
    assert "not-the-password" not in str(refused.value)
    manager.up(secure.model_copy(update={"stack": external.stack}), names=["kafka"], log=lambda _m: None)
