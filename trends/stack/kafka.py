"""A single-node Kafka 4 broker in KRaft combined mode, run from the Maven-resolved jars."""

from __future__ import annotations

import subprocess
from pathlib import Path

from trendcore.errors import StackError
from trendcore.settings import Settings
from trends.stack import procs

LOG4J = """rootLogger.level=INFO
rootLogger.appenderRef.out.ref=OUT
appender.out.type=Console
appender.out.name=OUT
appender.out.layout.type=PatternLayout
appender.out.layout.pattern=[%d] %p %m (%c)%n
logger.kafka.name=kafka
logger.kafka.level=WARN
logger.apache.name=org.apache.kafka
logger.apache.level=WARN
logger.started.name=kafka.server.KafkaRaftServer
logger.started.level=INFO
"""


def service(settings: Settings) -> procs.Service:
    host, port = settings.kafka.host_port
    return procs.Service("kafka", settings.stack.home / "run", host, port)


def _properties(settings: Settings, data: Path) -> str:
    host, port = settings.kafka.host_port
    ctl = settings.stack.kafka_controller_port
    return "\n".join(
        [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@{host}:{ctl}",
            f"listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{ctl}",
            f"advertised.listeners=PLAINTEXT://{host}:{port}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            f"log.dirs={data}",
            f"num.partitions={settings.kafka.partitions}",
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=4",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "auto.create.topics.enable=false",
            "num.io.threads=2",
            "num.network.threads=2",
            "log.retention.hours=168",
            "",
        ]
    )


def _java(settings: Settings, *args: str) -> list[str]:
    jars = settings.stack.jars / "kafka"
    if not any(jars.glob("kafka_2.13-*.jar")):
        raise StackError(f"no Kafka jars in {jars}: run scripts/bootstrap.sh first")
    conf = settings.stack.home / "kafka"
    return [
        "java",
        *settings.stack.kafka_heap.split(),
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={conf / 'log4j2.properties'}",
        "-cp",
        f"{jars}/*",
        *args,
    ]


def prepare(settings: Settings) -> Path:
    """Write server.properties and format the storage once (KRaft needs a cluster id)."""
    conf = settings.stack.home / "kafka"
    data = conf / "data"
    conf.mkdir(parents=True, exist_ok=True)
    props = conf / "server.properties"
    props.write_text(_properties(settings, data))
    (conf / "log4j2.properties").write_text(LOG4J)
    if not (data / "meta.properties").exists():
        cluster_id = subprocess.run(
            _java(settings, "kafka.tools.StorageTool", "random-uuid"), capture_output=True, text=True, check=True
        ).stdout.split()[-1]
        result = subprocess.run(
            _java(settings, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props)),
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise StackError(f"formatting Kafka storage failed:\n{result.stdout}\n{result.stderr}")
    return props


def start(settings: Settings) -> int:
    """Format if needed and start the broker; returns its PID once it accepts connections."""
    svc = service(settings)
    props = prepare(settings)
    pid = procs.start(svc, _java(settings, "kafka.Kafka", str(props)))
    procs.wait_ready(svc, settings.stack.start_timeout_s)
    return pid
