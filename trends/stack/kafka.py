"""A single-node Kafka 4 broker in KRaft combined mode, run from the Maven-resolved jars.

It always listens in PLAINTEXT on the bootstrap address of the settings. With `stack.kafka_sasl_port` it
also listens with SASL_SSL there, like a secured production cluster: a CA and a broker certificate
(for 127.0.0.1 and localhost) made with openssl at start, and a SCRAM user `trends` whose password is
made once and kept, all in `kafka/tls` under the stack home. `sasl_client_settings` gives the client
settings for that listener.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from pathlib import Path

from pydantic import SecretStr

from adapters import kafka as kafka_io
from trendcore.errors import ServiceError, StackError
from trendcore.settings import KafkaSettings, Settings
from trends.stack import procs

SASL_USER = "trends"
SASL_MECHANISM = "SCRAM-SHA-512"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
CERT_DAYS = 30

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


def tls_folder(settings: Settings) -> Path:
    """Where the local broker's CA, certificate, keystore and SASL password live."""
    return settings.stack.home / "kafka" / "tls"


def _listeners(settings: Settings) -> list[str]:
    """The listener lines: PLAINTEXT and the controller, plus SASL_SSL when its port is set."""
    host, port = settings.kafka.host_port
    ctl, sasl = settings.stack.kafka_controller_port, settings.stack.kafka_sasl_port
    if sasl is None:
        return [
            f"listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{ctl}",
            f"advertised.listeners=PLAINTEXT://{host}:{port}",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        ]
    tls = tls_folder(settings)
    return [
        f"listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{ctl},SASL_SSL://{host}:{sasl}",
        f"advertised.listeners=PLAINTEXT://{host}:{port},SASL_SSL://{host}:{sasl}",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
        "inter.broker.listener.name=PLAINTEXT",
        "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512",
        f"listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config={SCRAM_MODULE}",
        f"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={SCRAM_MODULE}",
        "listener.name.sasl_ssl.ssl.keystore.type=PKCS12",
        f"listener.name.sasl_ssl.ssl.keystore.location={tls / 'broker.p12'}",
        f"listener.name.sasl_ssl.ssl.keystore.password={(tls / 'keystore.password').read_text().strip()}",
    ]


def _properties(settings: Settings, data: Path) -> str:
    host, _ = settings.kafka.host_port
    ctl = settings.stack.kafka_controller_port
    return "\n".join(
        [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@{host}:{ctl}",
            *_listeners(settings),
            "controller.listener.names=CONTROLLER",
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


def _private_file(path: Path, text: str) -> None:
    """Write a file only its owner may read."""
    path.touch(mode=0o600, exist_ok=True)
    os.chmod(path, 0o600)
    path.write_text(text)


def _openssl(folder: Path, *args: str) -> None:
    result = subprocess.run(["openssl", *args], cwd=folder, capture_output=True, text=True)
    if result.returncode != 0:
        raise StackError(f"openssl {args[0]} failed making the Kafka TLS files in {folder}:\n{result.stderr}")


def make_certificates(settings: Settings) -> Path:
    """A CA and a broker certificate signed by it (for 127.0.0.1 and localhost), the broker's PKCS12 keystore
    and its password, in tls_folder; kept while the broker certificate is valid for another day. Returns the
    CA file clients trust (ssl.ca.location)."""
    tls = tls_folder(settings)
    tls.mkdir(parents=True, exist_ok=True)
    ca, keystore = tls / "ca.pem", tls / "broker.p12"
    fresh = subprocess.run(["openssl", "x509", "-checkend", "86400", "-noout", "-in", "broker.pem"], cwd=tls,
                           capture_output=True).returncode == 0
    if fresh and ca.exists() and keystore.exists() and (tls / "keystore.password").exists():
        return ca
    password = secrets.token_hex(16)
    _private_file(tls / "keystore.password", password)
    days = str(CERT_DAYS)
    _openssl(tls, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", "ca.key", "-out", "ca.pem", "-days", days, "-subj", "/CN=trends local Kafka CA",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    _openssl(tls, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "broker.key",
             "-out", "broker.csr", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost")
    _openssl(tls, "x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-copy_extensions", "copy", "-days", days, "-out", "broker.pem")
    _openssl(tls, "pkcs12", "-export", "-in", "broker.pem", "-inkey", "broker.key", "-certfile", "ca.pem",
             "-name", "broker", "-out", "broker.p12", "-passout", f"file:{tls / 'keystore.password'}")
    for secret in ("ca.key", "broker.key", "broker.p12"):
        os.chmod(tls / secret, 0o600)
    return ca


def sasl_password(settings: Settings) -> SecretStr:
    """The SCRAM password of the local broker's user `trends`: made at first use, then kept (owner-only file)."""
    path = tls_folder(settings) / "sasl.password"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        _private_file(path, secrets.token_urlsafe(18))
    return SecretStr(path.read_text().strip())


def sasl_client_settings(settings: Settings) -> KafkaSettings:
    """Client settings for the local broker's SASL_SSL listener: SCRAM-SHA-512 as `trends`, trusting the CA."""
    port = settings.stack.kafka_sasl_port
    if port is None:
        raise StackError("the local broker has no SASL_SSL listener: set TRENDS_STACK__KAFKA_SASL_PORT")
    host, _ = settings.kafka.host_port
    client = {"security.protocol": "SASL_SSL", "sasl.mechanism": SASL_MECHANISM, "sasl.username": SASL_USER,
              "ssl.ca.location": str(tls_folder(settings) / "ca.pem")}
    return KafkaSettings.model_validate({**settings.kafka.model_dump(), "bootstrap": f"{host}:{port}",
                                         "client": client, "sasl_password": sasl_password(settings)})


def _plaintext(settings: Settings) -> KafkaSettings:
    """Client settings for the local broker's own PLAINTEXT listener (whatever security the clients use)."""
    return settings.kafka.model_copy(update={"client": {}, "sasl_password": None})


def enable_sasl(settings: Settings) -> None:
    """Store the SCRAM user through the PLAINTEXT listener, then wait until the SASL_SSL listener lets it in."""
    if settings.stack.kafka_sasl_port is None:
        return
    kafka_io.upsert_scram_user(_plaintext(settings), SASL_USER, sasl_password(settings).get_secret_value())
    client = sasl_client_settings(settings)
    deadline = time.monotonic() + settings.stack.start_timeout_s
    while True:
        try:
            kafka_io.ping(client, 2.0)
            return
        except ServiceError as exc:  # the new credentials reach the broker's cache a moment after they are stored
            if time.monotonic() > deadline:
                raise StackError(f"kafka: the SASL_SSL listener on {client.bootstrap} refuses the stack's own "
                                 f"user: {exc}") from exc
            time.sleep(0.25)


def prepare(settings: Settings) -> Path:
    """Write server.properties (TLS files first, for a SASL_SSL listener) and format the storage once (KRaft
    needs a cluster id). An existing storage starts with or without the SASL_SSL listener: its user is stored
    after start (enable_sasl), not at format time."""
    conf = settings.stack.home / "kafka"
    data = conf / "data"
    conf.mkdir(parents=True, exist_ok=True)
    if settings.stack.kafka_sasl_port is not None:
        make_certificates(settings)
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
    try:
        enable_sasl(settings)
    except BaseException:
        procs.stop(svc)  # a broker whose secured listener fails is not left behind
        raise
    return pid
