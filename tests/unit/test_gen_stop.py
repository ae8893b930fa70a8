"""What Ctrl-C prints when the generator stops: one line on what was not delivered, and why in plain words."""

from __future__ import annotations

import confluent_kafka
import pytest

from adapters.kafka import client_error_reason
from trendcore.settings import KafkaSettings
from trends.gen.run import STOP_FLUSH_S, GenResult, stop_line

KAFKA = KafkaSettings(bootstrap="127.0.0.1:19092")
CODES = confluent_kafka.KafkaError


def test_the_stop_line_counts_what_was_not_delivered_and_says_why():
    result = GenResult(1000, 2345, 4.2, stopped=True, undelivered=1234, reason="Kafka unreachable at 127.0.0.1:19092")
    assert stop_line(result) == "stopped: 1,234 of 2,345 records not delivered (Kafka unreachable at 127.0.0.1:19092)"


def test_without_a_client_error_the_stop_line_blames_the_bounded_wait():
    result = GenResult(1000, 2345, 4.2, stopped=True, undelivered=5)
    expected = f"stopped: 5 of 2,345 records not delivered (not acknowledged within {STOP_FLUSH_S:g} s)"
    assert stop_line(result) == expected


def test_the_stop_line_says_when_everything_was_delivered():
    result = GenResult(1000, 2345, 4.2, stopped=True)
    assert stop_line(result) == "stopped: all 2,345 records delivered (1,000 posts in 4.2 s)"


@pytest.mark.parametrize("code", [CODES._TRANSPORT, CODES._ALL_BROKERS_DOWN, CODES._RESOLVE])
def test_no_broker_answering_is_named_by_the_address(code):
    text = "127.0.0.1:19092/bootstrap: Connect to ipv4#127.0.0.1:19092 failed: Connection refused"
    assert client_error_reason(code, text, KAFKA) == "Kafka unreachable at 127.0.0.1:19092"


def test_a_refused_authentication_and_other_errors_keep_librdkafkas_words():
    refused = client_error_reason(CODES._AUTHENTICATION, "SASL authentication error", KAFKA)
    assert refused.startswith("Kafka authentication failed at 127.0.0.1:19092")
    assert "SASL authentication error" in refused
    assert client_error_reason(CODES._SSL, "handshake failed", KAFKA) == "Kafka at 127.0.0.1:19092: handshake failed"
