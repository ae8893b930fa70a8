"""One map of Kafka client properties, Kafka's own names, in every client's dialect: kafka-python, librdkafka and
Spark's Java client; anything some client could not honour is refused with a ConfigError saying what to do."""

from __future__ import annotations

import os

import pytest

from trendcore import kafka_config
from trendcore.errors import ConfigError
from trendcore.settings import KafkaSettings, Settings, to_env

SASL_SSL = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "trends",
            "ssl.ca.location": "/etc/kafka/ca.pem"}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """No TRENDS_ variable of the caller's environment, and no .env file, in these tests."""
    for name in list(os.environ):
        if name.upper().startswith("TRENDS_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def secure(password: str = 'p@ss "quoted" \\ back', **extra: str) -> kafka_config.ClientSecurity:
    return kafka_config.parse({**SASL_SSL, **extra}, password)


def test_plaintext_is_the_default_in_every_dialect():
    plain = kafka_config.parse({})
    assert kafka_config.kafka_python(plain) == {"security_protocol": "PLAINTEXT"}
    assert kafka_config.librdkafka(plain) == {"security.protocol": "PLAINTEXT"}
    assert kafka_config.spark_options(plain) == {"kafka.security.protocol": "PLAINTEXT"}


def test_kafka_python_gets_its_keyword_arguments():
    assert kafka_config.kafka_python(secure("pw")) == {
        "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "trends",
        "sasl_plain_password": "pw", "ssl_check_hostname": True, "ssl_cafile": "/etc/kafka/ca.pem"}


def test_librdkafka_gets_kafka_names():
    assert kafka_config.librdkafka(secure("pw", **{"ssl.endpoint.identification.algorithm": "none"})) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "trends",
        "sasl.password": "pw", "ssl.ca.location": "/etc/kafka/ca.pem", "ssl.endpoint.identification.algorithm": "none"}


def test_spark_gets_prefixed_java_options_a_jaas_line_and_a_pem_truststore():
    options = kafka_config.spark_options(secure())
    jaas = options.pop("kafka.sasl.jaas.config")
    assert options == {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
                       "kafka.ssl.endpoint.identification.algorithm": "https",
                       "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": "/etc/kafka/ca.pem"}
    assert jaas == ('org.apache.kafka.common.security.scram.ScramLoginModule required username="trends" '
                    'password="p@ss \\"quoted\\" \\\\ back";')
    plain = kafka_config.spark_options(kafka_config.parse({**SASL_SSL, "sasl.mechanism": "plain"}, "x"))
    assert plain["kafka.sasl.jaas.config"].startswith("org.apache.kafka.common.security.plain.PlainLoginModule ")
    no_check = kafka_config.spark_options(secure(**{"ssl.endpoint.identification.algorithm": "none"}))
    assert no_check["kafka.ssl.endpoint.identification.algorithm"] == ""  # Java's way to say none


def test_tls_without_sasl_and_sasl_without_tls():
    tls = kafka_config.parse({"security.protocol": "ssl", "ssl.ca.location": "/ca.pem"})
    assert kafka_config.kafka_python(tls) == {"security_protocol": "SSL", "ssl_check_hostname": True,
                                              "ssl_cafile": "/ca.pem"}
    sasl = kafka_config.parse({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                               "sasl.username": "u"}, "p")
    assert kafka_config.librdkafka(sasl) == {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                             "sasl.username": "u", "sasl.password": "p"}
    assert "kafka.ssl.truststore.location" not in kafka_config.spark_options(sasl)


@pytest.mark.parametrize(("client", "password", "says"), [
    ({"sasl.password": "x"}, None, "TRENDS_KAFKA__SASL_PASSWORD"),
    ({"sasl.jaas.config": "x"}, None, "is a secret"),
    ({"bootstrap.servers": "b:9092"}, None, "TRENDS_KAFKA__BOOTSTRAP"),
    ({"sasl.kerberos.service.name": "kafka"}, None, "supported: security.protocol"),
    ({"security.protocol": "TLS"}, None, "expected one of PLAINTEXT, SSL"),
    ({"security.protocol": "SASL_SSL", "sasl.username": "u"}, "p", "needs sasl.mechanism"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI", "sasl.username": "u"}, "p", "SCRAM-SHA-512"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}, "p", "needs sasl.username"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u"}, None, "needs sasl.username"),
    ({"sasl.username": "u"}, "p", "security.protocol is PLAINTEXT"),
    ({}, "p", "TRENDS_KAFKA__SASL_PASSWORD set, but"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u",
      "ssl.ca.location": "/ca.pem"}, "p", "use SSL or SASL_SSL"),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "strict"}, None, "https or none"),
])
def test_what_no_client_could_use_is_refused_saying_what_to_do(client, password, says):
    with pytest.raises(ConfigError, match=says.replace(".", r"\.")):
        kafka_config.parse(client, password)


def test_description_names_mechanism_and_user_never_the_password():
    described = secure("hunter2").describe()
    assert described == "SASL_SSL, SCRAM-SHA-512 as user 'trends'" and "hunter2" not in described


def test_settings_refuse_a_bad_map_at_start_and_too_many_insync_replicas(monkeypatch):
    monkeypatch.setenv("TRENDS_KAFKA__CLIENT", '{"sasl.password": "oops"}')
    with pytest.raises(ConfigError, match="is a secret"):
        Settings()
    monkeypatch.delenv("TRENDS_KAFKA__CLIENT")
    with pytest.raises(ConfigError, match="MIN_INSYNC_REPLICAS=3 is more than"):
        KafkaSettings(replication_factor=2, min_insync_replicas=3)


def test_the_password_is_a_secret_that_reaches_child_processes(monkeypatch):
    monkeypatch.setenv("TRENDS_KAFKA__CLIENT", '{"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", '
                                               '"sasl.username": "svc"}')
    monkeypatch.setenv("TRENDS_KAFKA__SASL_PASSWORD", "s3cret")
    settings = Settings()
    assert "s3cret" not in repr(settings) and "s3cret" not in str(settings.model_dump())
    env = to_env(settings)
    assert env["TRENDS_KAFKA__SASL_PASSWORD"] == "s3cret"  # the value itself, not pydantic's mask
    for name in list(os.environ):
        if name.startswith("TRENDS_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    child = Settings()
    assert child == settings and child.kafka.security().password == "s3cret"


def test_topic_settings_become_topic_configs():
    kafka = KafkaSettings(replication_factor=3, min_insync_replicas=2, retention_ms=86_400_000 * 3)
    assert kafka.topic_configs == {"min.insync.replicas": "2", "retention.ms": "259200000"}
