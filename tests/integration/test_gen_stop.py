"""Stopping is one Ctrl-C: `trends gen` (the demo's producer) stops on the first SIGINT within seconds, says in one
line how many records were not delivered and why, and exits 130, also when no broker answers."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from adapters import kafka as kafka_io
from trendcore.settings import Settings, to_env
from trends.gen.run import STOP_FLUSH_S

pytestmark = pytest.mark.integration

PROGRESS = re.compile(r"([\d,]+) posts, ([\d,]+) records")
STOP_WITHIN_S = STOP_FLUSH_S + 7  # the bounded flush, then dropping the rest and the interpreter's exit


class Gen:
    """`trends gen` as a user runs it in a terminal (TTY_COMPATIBLE: the live progress bar), its stderr collected."""

    def __init__(self, settings: Settings, rate: int) -> None:
        env = {**os.environ, **to_env(settings), "TTY_COMPATIBLE": "1", "COLUMNS": "200"}
        # SIGINT as a terminal's Ctrl-C sends it: a shell's background job ignores it, and children inherit that
        self.proc = subprocess.Popen([sys.executable, "-m", "trends", "gen", "--rate", str(rate)], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.err: list[str] = []
        self.reader = threading.Thread(target=lambda: self.err.extend(iter(lambda: self.proc.stderr.read(1), "")),
                                       daemon=True)
        self.reader.start()

    def wait_for_posts(self, at_least: int, timeout_s: float = 60.0) -> None:
        """Until the progress bar shows `at_least` posts handed to the producer."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            shown = [int(m.group(1).replace(",", "")) for m in PROGRESS.finditer("".join(self.err))]
            if shown and max(shown) >= at_least:
                return
            time.sleep(0.2)
        self.proc.kill()
        pytest.fail(f"no progress to {at_least} posts (exit {self.proc.poll()}): {''.join(self.err)[-2000:]}")

    def ctrl_c(self) -> tuple[int, float, str]:
        """One SIGINT: (exit code, seconds until it exited, everything it wrote), killed when it takes too long."""
        self.proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        took = time.monotonic() - sent
        self.reader.join(timeout=10)
        return code, took, self.proc.stdout.read() + "".join(self.err)


def _closed_port() -> int:
    """A port nothing listens on (bound and released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_ctrl_c_with_kafka_unreachable_stops_at_once_saying_what_was_lost(settings):
    bootstrap = f"127.0.0.1:{_closed_port()}"
    gen = Gen(settings.model_copy(update={"kafka": settings.kafka.model_copy(update={"bootstrap": bootstrap})}), 500)
    gen.wait_for_posts(1000)
    code, took, output = gen.ctrl_c()
    assert code == 130, output[-2000:]
    assert took < STOP_WITHIN_S, output[-2000:]
    lost = re.findall(r"stopped: ([\d,]+) of ([\d,]+) records not delivered \((.*?)\)", output)
    assert len(lost) == 1, output[-2000:]
    undelivered, records, why = lost[0]
    assert undelivered == records and int(records.replace(",", "")) > 1000  # nothing could be delivered
    assert why == f"Kafka unreachable at {bootstrap}"
    assert output.count("not delivered") == 1
    assert "rdkafka" not in output and "Connection refused" not in output  # no line per reconnection attempt
    assert "Traceback" not in output and "Aborted" not in output


def test_ctrl_c_with_kafka_up_delivers_everything_sent(stack):
    run = uuid.uuid4().hex[:8]
    own = stack.model_copy(deep=True)
    own.kafka.posts_topic, own.kafka.engagements_topic = f"stop-{run}-posts", f"stop-{run}-engagements"
    own.kafka.dead_letter_topic = f"stop-{run}-dead-letters"
    kafka_io.ensure_topics(own.kafka)
    gen = Gen(own, 500)
    gen.wait_for_posts(2000)
    code, took, output = gen.ctrl_c()
    assert code == 130, output[-2000:]
    assert took < STOP_WITHIN_S, output[-2000:]
    delivered = re.findall(r"stopped: all ([\d,]+) records delivered", output)
    assert len(delivered) == 1, output[-2000:]
    in_kafka = sum(sum(kafka_io.end_offsets(own.kafka, topic).values())
                   for topic in (own.kafka.posts_topic, own.kafka.engagements_topic))
    assert in_kafka == int(delivered[0].replace(",", "")) > 2000
    assert "not delivered" not in output and "Traceback" not in output
