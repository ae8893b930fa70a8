"""Kafka client security under Kafka's own property names, translated into each client's dialect.

One map of properties in the settings (`TRENDS_KAFKA__CLIENT`, a JSON object, and the secret
`TRENDS_KAFKA__SASL_PASSWORD`) configures every Kafka client of the project: kafka-python (the
consumers and the admin client), librdkafka (the producer) and the Java client inside Spark's Kafka
source (`kafka.`-prefixed options). Only properties all three can honour are accepted: a property
one client would use and another silently drop is refused with a ConfigError at start instead.
Pure: no file is read and no client is imported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from trendcore.errors import ConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
"""The SASL mechanisms every client here speaks, with the Java login module Spark's client needs for each."""

SUPPORTED = {
    "security.protocol": f"one of {', '.join(PROTOCOLS)} (default PLAINTEXT)",
    "sasl.mechanism": f"one of {', '.join(LOGIN_MODULES)}",
    "sasl.username": "the SASL user (its password: TRENDS_KAFKA__SASL_PASSWORD)",
    "ssl.ca.location": "PEM file of the CA certificates that sign the brokers' certificates",
    "ssl.endpoint.identification.algorithm": "https (default: the broker's name must match its certificate) "
                                             "or none",
}
"""Every property the map accepts, and what it takes."""

SECRETS = ("sasl.password", "sasl.jaas.config", "ssl.key.password", "ssl.keystore.password",
           "ssl.truststore.password", "sasl.oauthbearer.client.secret")
"""Secret properties: never in the plain map, which may be printed."""

ELSEWHERE = {"bootstrap.servers": "TRENDS_KAFKA__BOOTSTRAP", "request.timeout.ms": "TRENDS_KAFKA__REQUEST_TIMEOUT_MS"}


@dataclass(frozen=True)
class ClientSecurity:
    """How a client connects and authenticates: the checked meaning of the property map."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    ca_location: str | None = None
    check_hostname: bool = True

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def describe(self) -> str:
        """For error messages, without the password: e.g. `SASL_SSL, SCRAM-SHA-512 as user 'trends'`."""
        return f"{self.protocol}, {self.mechanism} as user {self.username!r}" if self.sasl else self.protocol


def parse(client: Mapping[str, str], password: str | None = None) -> ClientSecurity:
    """Check the property map (and the SASL password kept apart from it); ConfigError saying what is wrong."""
    for name in client:
        if name in SECRETS:
            raise ConfigError(f"Kafka client property {name!r} is a secret: set the password in "
                              "TRENDS_KAFKA__SASL_PASSWORD (the JAAS line is built from it), "
                              "not in TRENDS_KAFKA__CLIENT")
        if name in ELSEWHERE:
            raise ConfigError(f"Kafka client property {name!r} has its own setting: {ELSEWHERE[name]}")
        if name not in SUPPORTED:
            known = "; ".join(f"{k}: {v}" for k, v in SUPPORTED.items())
            raise ConfigError(f"Kafka client property {name!r} is not one every client here can use "
                              f"(kafka-python, librdkafka, Spark); supported: {known}")
    protocol = client.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise ConfigError(f"Kafka security.protocol {protocol!r}: expected one of {', '.join(PROTOCOLS)}")
    security = ClientSecurity(
        protocol=protocol,
        mechanism=client["sasl.mechanism"].upper() if "sasl.mechanism" in client else None,
        username=client.get("sasl.username"),
        password=password,
        ca_location=client.get("ssl.ca.location"),
        check_hostname=_check_hostname(client.get("ssl.endpoint.identification.algorithm", "https")),
    )
    _check_consistent(security, client)
    return security


def _check_hostname(algorithm: str) -> bool:
    value = algorithm.strip().lower()
    if value not in ("https", "none", ""):
        raise ConfigError(f"Kafka ssl.endpoint.identification.algorithm {algorithm!r}: expected https or none")
    return value == "https"


def _check_consistent(security: ClientSecurity, client: Mapping[str, str]) -> None:
    """SASL needs a mechanism, a user and a password; SASL or TLS properties need a protocol that uses them."""
    sasl_set = [k for k in ("sasl.mechanism", "sasl.username") if k in client]
    if security.password is not None:
        sasl_set.append("TRENDS_KAFKA__SASL_PASSWORD")
    if security.sasl:
        if security.mechanism not in LOGIN_MODULES:
            raise ConfigError(f"Kafka security.protocol {security.protocol} needs sasl.mechanism, one of "
                              f"{', '.join(LOGIN_MODULES)} (got {security.mechanism!r})")
        if not security.username or security.password is None:
            raise ConfigError(f"Kafka SASL ({security.mechanism}) needs sasl.username in TRENDS_KAFKA__CLIENT and "
                              "the password in TRENDS_KAFKA__SASL_PASSWORD")
    elif sasl_set:
        raise ConfigError(f"{', '.join(sasl_set)} set, but Kafka security.protocol is {security.protocol}: "
                          "use SASL_SSL (or SASL_PLAINTEXT)")
    tls_set = [k for k in ("ssl.ca.location", "ssl.endpoint.identification.algorithm") if k in client]
    if tls_set and not security.tls:
        raise ConfigError(f"{', '.join(tls_set)} set, but Kafka security.protocol is {security.protocol}: "
                          "use SSL or SASL_SSL")


def kafka_python(security: ClientSecurity) -> dict[str, object]:
    """Keyword arguments of kafka-python's KafkaConsumer and KafkaAdminClient."""
    options: dict[str, object] = {"security_protocol": security.protocol}
    if security.sasl:
        options.update(sasl_mechanism=security.mechanism, sasl_plain_username=security.username,
                       sasl_plain_password=security.password)
    if security.tls:
        options["ssl_check_hostname"] = security.check_hostname
        if security.ca_location:
            options["ssl_cafile"] = security.ca_location
    return options


def librdkafka(security: ClientSecurity) -> dict[str, str]:
    """Properties of a librdkafka (confluent-kafka) client: mostly Kafka's names, as given."""
    options = {"security.protocol": security.protocol}
    if security.sasl:
        options.update({"sasl.mechanism": security.mechanism or "", "sasl.username": security.username or "",
                        "sasl.password": security.password or ""})
    if security.tls:
        options["ssl.endpoint.identification.algorithm"] = "https" if security.check_hostname else "none"
        if security.ca_location:
            options["ssl.ca.location"] = security.ca_location
    return options


def jaas_config(security: ClientSecurity) -> str:
    """The Java client's `sasl.jaas.config` line: the login module of the mechanism, user and password quoted."""
    module = LOGIN_MODULES[security.mechanism or ""]
    return (f'{module} required username="{_jaas_quote(security.username or "")}" '
            f'password="{_jaas_quote(security.password or "")}";')


def _jaas_quote(value: str) -> str:
    """Escape a value for a double-quoted JAAS option (the parser reads backslash escapes)."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def spark_options(security: ClientSecurity) -> dict[str, str]:
    """Options of Spark's Kafka source: Java client properties with the `kafka.` prefix. The CA file is
    read as a PEM truststore (`ssl.truststore.type=PEM`); it must exist at the same path on the executors."""
    options = {"kafka.security.protocol": security.protocol}
    if security.sasl:
        options["kafka.sasl.mechanism"] = security.mechanism or ""
        options["kafka.sasl.jaas.config"] = jaas_config(security)
    if security.tls:
        options["kafka.ssl.endpoint.identification.algorithm"] = "https" if security.check_hostname else ""
        if security.ca_location:
            options["kafka.ssl.truststore.type"] = "PEM"
            options["kafka.ssl.truststore.location"] = security.ca_location
    return options
