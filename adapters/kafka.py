"""Thin Kafka adapter: clients built from settings, topic creation, errors wrapped.

Every client gets the security of `settings.kafka` (TLS, SASL) in its own dialect (trendcore.kafka_config),
and a failed authentication is reported as such, naming the mechanism and user (never the password): the
producer watches librdkafka's client errors; before a kafka-python client first connects with SASL, one
librdkafka metadata request checks the credentials (kafka-python cannot tell a refusal from a lost
connection, see _metadata_request).
Consumers and the admin client are kafka-python. Producing uses confluent-kafka (librdkafka):
kafka-python's producer tops out near 10,000 records/s on one core here, librdkafka sends over
300,000, and the load generator must outpace the speed layer it measures (docs/decisions.md).
Both partition keyed records with murmur2, so any client puts a post id on the same partition.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NamedTuple

import confluent_kafka
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.admin import ScramMechanism, UserScramCredentialUpsertion
from kafka.errors import (
    KafkaError,
    SaslAuthenticationFailedError,
    TopicAlreadyExistsError,
    UnsupportedSaslMechanismError,
)

from trendcore import kafka_config
from trendcore.errors import ServiceError
from trendcore.settings import KafkaSettings

AUTH_ERRORS = (SaslAuthenticationFailedError, UnsupportedSaslMechanismError)
UNREACHABLE_CODES = frozenset({confluent_kafka.KafkaError._TRANSPORT, confluent_kafka.KafkaError._ALL_BROKERS_DOWN,
                               confluent_kafka.KafkaError._RESOLVE})
"""librdkafka client errors that mean no broker answers (refused, down, unknown host)."""
MAYBE_WRITTEN_CODES = frozenset({
    confluent_kafka.KafkaError._MSG_TIMED_OUT, confluent_kafka.KafkaError._TIMED_OUT,
    confluent_kafka.KafkaError._PURGE_INFLIGHT, confluent_kafka.KafkaError.REQUEST_TIMED_OUT,
    confluent_kafka.KafkaError.NETWORK_EXCEPTION, confluent_kafka.KafkaError._TRANSPORT,
})
"""Delivery errors after which a record may be stored all the same (it may have reached the broker before the
error: librdkafka does not say, in this client, whether it was persisted)."""
POLL_S = 0.1
"""How long the background poller's each poll waits for delivery reports."""
PURGE_REPORTS_S = 1.0
"""How long Producer.stop waits for librdkafka to hand back the delivery reports of the records it dropped."""


def auth_failed(kafka: KafkaSettings, reason: object) -> ServiceError:
    """The error of a refused authentication: says so first, with where, how and as whom (no password)."""
    return ServiceError(f"Kafka authentication failed at {kafka.bootstrap} ({kafka.security().describe()}): {reason}")


@contextmanager
def kafka_errors(action: str, kafka: KafkaSettings | None = None) -> Iterator[None]:
    """Re-raise kafka-python errors as ServiceError, saying what we were doing (and, given the settings,
    that authentication failed when it did)."""
    try:
        yield
    except AUTH_ERRORS as exc:
        if kafka is None:
            raise ServiceError(f"Kafka authentication failed while {action}: {exc}") from exc
        raise auth_failed(kafka, exc) from exc
    except KafkaError as exc:
        raise ServiceError(f"Kafka: {action} failed: {exc}") from exc


def client_error_reason(code: int, text: str, kafka: KafkaSettings) -> str:
    """Plain words for a librdkafka client error, to say why records were not delivered: an unreachable
    cluster is named by its address (librdkafka's own text repeats per broker and attempt)."""
    if code in UNREACHABLE_CODES:
        return f"Kafka unreachable at {kafka.bootstrap}"
    if code == confluent_kafka.KafkaError._AUTHENTICATION:
        return str(auth_failed(kafka, text))
    return f"Kafka at {kafka.bootstrap}: {text}"


def python_options(kafka: KafkaSettings) -> dict[str, object]:
    """Connection options of a kafka-python client: servers, timeout and security."""
    options: dict[str, object] = dict(bootstrap_servers=kafka.bootstrap.split(","),
                                      request_timeout_ms=kafka.request_timeout_ms)
    options.update(kafka_config.kafka_python(kafka.security()))
    return options


class Report(NamedTuple):
    """One record's delivery report in plain values: where it was stored, or why not and whether it may have
    been stored all the same (`maybe_written`)."""

    topic: str
    partition: int
    offset: int
    error: str | None = None
    maybe_written: bool = False


def report_of(err: confluent_kafka.KafkaError | None, msg: confluent_kafka.Message) -> Report:
    """The Report of a librdkafka delivery callback's arguments."""
    if err is None:
        return Report(msg.topic(), msg.partition(), msg.offset())
    return Report(msg.topic(), msg.partition(), -1, str(err.str()), err.code() in MAYBE_WRITTEN_CODES)


class Producer:
    """An idempotent, batching producer (acks=all); `send` never blocks for long, `flush` reports failures,
    `stop` gives up within seconds. librdkafka logs nothing itself: its client errors come to `_client_error`,
    and the last one says why when records are not delivered (a dead broker is one reason, not a line per retry)."""

    def __init__(self, kafka: KafkaSettings, **overrides: object) -> None:
        self._kafka = kafka
        config = {
            **kafka_config.librdkafka(kafka.security()),
            "bootstrap.servers": kafka.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "partitioner": "murmur2_random",
            "message.timeout.ms": kafka.request_timeout_ms * 4,
            "error_cb": self._client_error,
            "log_level": 0,  # its "Connect to ... failed" lines, one per attempt, would flood the terminal
        }
        config.update(overrides)
        self._auth_error: str | None = None
        self._last_error: confluent_kafka.KafkaError | None = None
        self._errors: list[str] = []
        self._poller: threading.Thread | None = None
        self._polling = threading.Event()
        try:
            self._producer = confluent_kafka.Producer(config)
        except confluent_kafka.KafkaException as exc:
            raise ServiceError(f"Kafka: creating a producer for {kafka.bootstrap} failed: {exc}") from exc

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self._errors.append(f"{msg.topic()}: {err}")

    def _client_error(self, err: confluent_kafka.KafkaError) -> None:
        """librdkafka's client-level errors (served by poll/flush): keep a refused authentication, which
        librdkafka would otherwise retry silently until every message times out, and the last one for `reason`."""
        self._last_error = err
        if err.code() == confluent_kafka.KafkaError._AUTHENTICATION:
            self._auth_error = err.str()

    def reason(self) -> str | None:
        """Why records may not be delivered, from the last client error seen since all were (None: no error)."""
        err = self._last_error
        return None if err is None else client_error_reason(err.code(), err.str(), self._kafka)

    def _with_reason(self, message: str) -> str:
        """`message`, followed by `reason()` in parentheses when there is one."""
        reason = self.reason()
        return f"{message} ({reason})" if reason else message

    def auth_refusal(self) -> ServiceError | None:
        """The error of a refused authentication seen by librdkafka (None: none seen)."""
        return None if self._auth_error is None else auth_failed(self._kafka, self._auth_error)

    def send_reported(self, topic: str, key: bytes | None, value: bytes, report: Callable[[Report], None]) -> None:
        """Queue one record; `report` gets its Report from the thread that serves delivery callbacks
        (`start_polling`'s), so the sender need not flush the whole queue to learn about its own records."""
        self.send(topic, key, value, on_delivery=lambda err, msg: report(report_of(err, msg)))

    def start_polling(self) -> None:
        """Serve delivery reports and client errors from one background thread until `stop_polling`."""
        if self._poller is None:
            self._polling.set()
            self._poller = threading.Thread(target=self._poll_loop, name="kafka-producer-poll", daemon=True)
            self._poller.start()

    def _poll_loop(self) -> None:
        while self._polling.is_set():
            self._producer.poll(POLL_S)

    def stop_polling(self) -> None:
        """Stop the background poller (within one poll)."""
        self._polling.clear()
        if self._poller is not None:
            self._poller.join(POLL_S * 20)
            self._poller = None

    def _raise_auth_error(self) -> None:
        if self._auth_error is not None:
            raise auth_failed(self._kafka, self._auth_error)

    def send(self, topic: str, key: bytes | None, value: bytes, on_delivery=None) -> None:
        """Queue one record; waits only while the local queue is full."""
        callback = on_delivery or self._delivered
        while True:
            try:
                self._producer.produce(topic, value, key, on_delivery=callback)
                break
            except BufferError:
                self._producer.poll(0.05)
            except confluent_kafka.KafkaException as exc:
                raise ServiceError(f"Kafka: producing to {topic} failed: {exc}") from exc
            self._raise_auth_error()
        self._producer.poll(0)

    def flush(self, timeout_s: float = 60.0) -> None:
        """Wait until every queued record is acknowledged; raise ServiceError naming failures (at once,
        not after the timeout, when the broker refused our credentials)."""
        deadline = time.monotonic() + timeout_s
        left = self._producer.flush(min(timeout_s, 0.5))
        while left and time.monotonic() < deadline:
            self._raise_auth_error()
            left = self._producer.flush(min(0.5, max(0.0, deadline - time.monotonic())))
        if left:
            self._raise_auth_error()
            raise ServiceError(self._with_reason(f"Kafka: {left} records not acknowledged after {timeout_s:.0f} s"))
        errors, self._errors = self._errors, []
        failed = self._with_reason(f"Kafka: {len(errors)} records failed, first: {errors[0]}") if errors else None
        self._auth_error = self._last_error = None  # nothing is in flight: errors seen on the way are over
        if failed:
            raise ServiceError(failed)

    def close(self) -> None:
        self.flush()

    def stop(self, timeout_s: float) -> int:
        """Give up within about `timeout_s`: flush that long, then drop what is still queued or in flight; return
        how many records were not delivered (failed before, or dropped now). For Ctrl-C: librdkafka would
        otherwise retry a dead broker until message.timeout.ms."""
        with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C: drop the rest at once
            self._producer.flush(timeout_s)
        self._producer.purge()
        left = self._producer.flush(PURGE_REPORTS_S)  # serves the dropped records' reports (errors, counted)
        undelivered, self._errors = len(self._errors) + left, []
        return undelivered


def producer(kafka: KafkaSettings, **overrides: object) -> Producer:
    """A producer for our topics (librdkafka options may be overridden)."""
    return Producer(kafka, **overrides)


def consumer(kafka: KafkaSettings, *topics: str, **overrides) -> KafkaConsumer:
    """A consumer of `topics` (none: assign partitions yourself)."""
    check_authentication(kafka)
    options = python_options(kafka)
    options.update(overrides)
    with kafka_errors(f"connecting a consumer to {kafka.bootstrap}", kafka):
        return _build(KafkaConsumer, *topics, **options)


def _build(cls, *args, **options):
    """A kafka-python client. Its constructor starts an IO thread, then connects; when connecting fails
    (unreachable, credentials refused) the thread would be left running: stop it before re-raising."""
    client = cls.__new__(cls)
    try:
        client.__init__(*args, **options)
    except BaseException:
        for part, stop in (("_client", "close"), ("_net", "stop")):
            with contextlib.suppress(Exception):
                getattr(getattr(client, part), stop)()
        raise
    return client


@contextmanager
def admin_client(kafka: KafkaSettings, action: str, **overrides) -> Iterator[KafkaAdminClient]:
    """A kafka-python admin client for one action, closed after it; errors wrapped saying `action`."""
    check_authentication(kafka)
    options = python_options(kafka)
    options.update(overrides)
    with kafka_errors(f"{action} on {kafka.bootstrap}", kafka):
        admin = _build(KafkaAdminClient, **options)
        try:
            yield admin
        finally:
            admin.close()


def ensure_topics(kafka: KafkaSettings, partitions: int | None = None) -> list[str]:
    """Create the project's topics if missing, with the partitions, replication factor, min.insync.replicas
    and retention.ms of the settings; return the names that were created (existing topics are left as they are)."""
    count = partitions or kafka.partitions
    with admin_client(kafka, "creating topics") as admin:
        existing = set(admin.list_topics())
        wanted = [t for t in kafka.topics if t not in existing]
        if wanted:
            spec = {"num_partitions": count, "replication_factor": kafka.replication_factor,
                    "configs": kafka.topic_configs}
            try:
                admin.create_topics({t: dict(spec) for t in wanted})
            except TopicAlreadyExistsError:
                pass
        return wanted


def ping(kafka: KafkaSettings, timeout_s: float) -> None:
    """One metadata request with the configured security, within about `timeout_s`: ServiceError saying why
    not (authentication failed, or no answer) when it fails."""
    answered, refusal, last = _metadata_request(kafka, timeout_s)
    if refusal is not None:
        raise auth_failed(kafka, refusal)
    if not answered:
        raise ServiceError(f"Kafka: no metadata from {kafka.bootstrap} within {timeout_s:g} s: {last}")


def _metadata_request(kafka: KafkaSettings, timeout_s: float) -> tuple[bool, str | None, object]:
    """Ask for metadata through librdkafka until it answers, the brokers refuse our SASL credentials, or time
    is up: (answered, the refusal, the last error). librdkafka, not kafka-python: kafka-python 3.0.12 drops
    the broker's authentication-failed response when the connection's close arrives with it (as the broker
    sends them), so a wrong password looks like a lost connection there, retried until its timeout."""
    refusals: list[str] = []

    def on_error(err: confluent_kafka.KafkaError) -> None:
        if err.code() == confluent_kafka.KafkaError._AUTHENTICATION:
            refusals.append(err.str())

    config = {**kafka_config.librdkafka(kafka.security()), "bootstrap.servers": kafka.bootstrap,
              "error_cb": on_error, "log_level": 0}  # errors come through on_error, not as stderr lines
    try:
        client = AdminClient(config)
    except confluent_kafka.KafkaException as exc:
        raise ServiceError(f"Kafka: a client for {kafka.bootstrap} could not be made: {exc}") from exc
    deadline, last = time.monotonic() + timeout_s, None
    while True:
        try:
            client.list_topics(timeout=max(0.05, min(0.5, deadline - time.monotonic())))
            return True, None, None
        except confluent_kafka.KafkaException as exc:
            last = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else exc
        client.poll(0)  # serves on_error
        if refusals or time.monotonic() >= deadline:
            return False, (refusals[0] if refusals else None), last


_AUTHENTICATED: set[int] = set()
"""Client configurations whose SASL credentials a broker accepted in this process (checked once)."""


def check_authentication(kafka: KafkaSettings, timeout_s: float = 5.0) -> None:
    """Before a kafka-python client connects with SASL: ServiceError naming Kafka authentication when the brokers
    refuse the credentials (see _metadata_request for why kafka-python cannot tell). Once accepted, not asked
    again in this process; brokers that do not answer are left to the client's own waiting and errors."""
    security = kafka.security()
    if not security.sasl:
        return
    key = hash((kafka.bootstrap, tuple(sorted(kafka_config.librdkafka(security).items()))))
    if key in _AUTHENTICATED:
        return
    answered, refusal, _ = _metadata_request(kafka, timeout_s)
    if refusal is not None:
        raise auth_failed(kafka, refusal)
    if answered:
        _AUTHENTICATED.add(key)


def upsert_scram_user(kafka: KafkaSettings, user: str, password: str,
                      mechanisms: tuple[str, ...] = ("SCRAM-SHA-256", "SCRAM-SHA-512")) -> None:
    """Create or update a SCRAM user's credentials (through a listener that lets us alter them)."""
    with admin_client(kafka, f"storing SCRAM credentials of {user!r}") as admin:
        for mechanism in mechanisms:  # one alteration of a user per request, says the broker
            upsert = UserScramCredentialUpsertion(user, ScramMechanism[mechanism.replace("-", "_")], password)
            error = admin.alter_user_scram_credentials([upsert]).get(user)
            if error:
                raise ServiceError(f"Kafka: storing the {mechanism} credentials of {user!r} failed: {error}")


def end_offsets(kafka: KafkaSettings, topic: str) -> dict[int, int]:
    """The next offset of every partition of a topic."""
    from kafka import TopicPartition

    with kafka_errors(f"reading end offsets of {topic}", kafka):
        client = consumer(kafka)
        try:
            parts = [TopicPartition(topic, p) for p in sorted(client.partitions_for_topic(topic) or [])]
            return {tp.partition: off for tp, off in client.end_offsets(parts).items()}
        finally:
            client.close()
