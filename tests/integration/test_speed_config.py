"""A worker pool whose configuration cannot work stops once, saying why, instead of restarting forever."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient

from adapters import kafka as kafka_io
from speed.cli import CONFIG_EXIT
from trendcore.settings import Settings

pytestmark = pytest.mark.integration


def test_a_pool_on_topics_with_more_partitions_than_configured_stops_with_the_setting_named(stack: Settings,
                                                                                            tmp_path: Path):
    uid = uuid.uuid4().hex[:8]
    kafka = stack.kafka.model_copy(update={"posts_topic": f"cfg-posts-{uid}", "engagements_topic": f"cfg-eng-{uid}",
                                           "dead_letter_topic": f"cfg-dlq-{uid}"})
    kafka_io.ensure_topics(kafka, partitions=3)
    env = {**os.environ, "TRENDS_KAFKA__BOOTSTRAP": kafka.bootstrap, "TRENDS_KAFKA__POSTS_TOPIC": kafka.posts_topic,
           "TRENDS_KAFKA__ENGAGEMENTS_TOPIC": kafka.engagements_topic,
           "TRENDS_KAFKA__DEAD_LETTER_TOPIC": kafka.dead_letter_topic, "TRENDS_KAFKA__PARTITIONS": "2",
           "TRENDS_REDIS__URL": stack.redis.url, "TRENDS_SPEED__GROUP": f"cfg-{uid}",
           "TRENDS_SPEED__METRICS_PORT": str(stack.speed.metrics_port + 94)}  # and + 95: free ports
    log = tmp_path / "pool.log"
    with open(log, "wb") as out:
        pool = subprocess.Popen([sys.executable, "-m", "speed", "run", "--workers", "2"], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        code = pool.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(pool.pid, signal.SIGKILL)
        code = None
    finally:
        admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap.split(","))
        admin.delete_topics([kafka.posts_topic, kafka.engagements_topic, kafka.dead_letter_topic])
        admin.close()
    said = log.read_text(errors="replace")
    assert code == CONFIG_EXIT, said
    assert "have 3 partitions but TRENDS_KAFKA__PARTITIONS is 2" in said and "stopping the pool" in said, said
    assert "restarting" not in said, said
