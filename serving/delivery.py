"""What happened to one write request's records: a waiter that collects their own delivery reports (no flush of
the shared producer), the verdict per record (written, not written, outcome unknown) and the 503 wording,
which says retrying is safe only where a retry is deduplicated downstream."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from adapters.kafka import Report
from trendcore.errors import ServiceError

BY_POST_ID, BY_EVENT_ID = "post_id", "event_id"
"""How a retried record is deduplicated downstream (None: it is not)."""


@dataclass(frozen=True, slots=True)
class Sent:
    """One record handed to the producer: its index in the body, post id, topic and how a copy is deduplicated."""

    index: int
    post_id: str
    topic: str
    dedup: str | None


class Waiter:
    """The delivery reports of one request's records, filled from the producer's poll thread; `wake` is called
    once, from that thread, when the last one arrives."""

    def __init__(self, sent: list[Sent], wake: Callable[[], None]) -> None:
        self._expected = {s.index for s in sent}
        self._reports: dict[int, Report] = {}
        self._lock = threading.Lock()
        self._wake: Callable[[], None] | None = wake
        if not self._expected:
            self._complete()

    def callback(self, index: int) -> Callable[[Report], None]:
        """The report callback of the record at `index` (the first report of a record wins)."""
        return lambda report: self.record(index, report)

    def record(self, index: int, report: Report) -> None:
        """Keep a record's report; wake the request when every record has one."""
        with self._lock:
            self._reports.setdefault(index, report)
            complete = self._expected <= self._reports.keys()
        if complete:
            self._complete()

    def _complete(self) -> None:
        with self._lock:
            wake, self._wake = self._wake, None
        if wake is not None:
            wake()

    def missing(self) -> list[int]:
        """Indexes of the records without a report yet."""
        with self._lock:
            return sorted(self._expected - self._reports.keys())

    def reports(self) -> dict[int, Report]:
        """A copy of the reports received so far."""
        with self._lock:
            return dict(self._reports)


@dataclass
class Outcome:
    """Every record of a request in one of three lists: stored (with its offset), not stored (a definite
    error), or unknown (no report in time, or an error after which Kafka may have stored it)."""

    written: list[tuple[Sent, Report]] = field(default_factory=list)
    not_written: list[tuple[Sent, Report]] = field(default_factory=list)
    unknown: list[tuple[Sent, Report | None]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """True when every record was written."""
        return not self.not_written and not self.unknown


def outcome(sent: list[Sent], reports: dict[int, Report]) -> Outcome:
    """Sort the records by their reports."""
    result = Outcome()
    for s in sent:
        r = reports.get(s.index)
        if r is None or (r.error is not None and r.maybe_written):
            result.unknown.append((s, r))
        elif r.error is not None:
            result.not_written.append((s, r))
        else:
            result.written.append((s, r))
    return result


def retry_safe(s: Sent) -> bool:
    """A copy of this record is deduplicated downstream: a post (post_id), or an engagement with an event_id."""
    return s.dedup is not None


def retry_advice(result: Outcome) -> str:
    """What retrying the records that are not (known to be) stored does; 'safe' only where copies deduplicate."""
    unknown = [s for s, _ in result.unknown]
    advice = []
    if result.not_written:
        advice.append("the records not written are not in Kafka: sending them again is safe")
    if any(s.dedup == BY_POST_ID for s in unknown):
        advice.append("retrying posts is safe: they are deduplicated by post_id")
    if any(s.dedup == BY_EVENT_ID for s in unknown):
        advice.append("retrying engagements that carry an event_id is safe: both layers count an event_id once")
    if any(s.dedup is None for s in unknown):
        advice.append("retrying engagements without an event_id may count them twice if Kafka stored them after "
                      "all (give each engagement an event_id to make retries safe)")
    return "; ".join(advice)


def message(result: Outcome, timeout_s: float, why: str | None = None) -> str:
    """The 503 detail: counts of records written, not written and unknown, the first error, and the retry advice."""
    total = len(result.written) + len(result.not_written) + len(result.unknown)
    parts = []
    if result.not_written:
        first = result.not_written[0][1].error
        parts.append(f"{len(result.not_written)} of {total} records not written (first error: {first})")
    if result.unknown:
        reason = next((r.error for _, r in result.unknown if r is not None), None) or \
            f"no acknowledgement within {timeout_s:g} s"
        parts.append(f"{len(result.unknown)} of {total} records with unknown outcome ({reason}): Kafka may still "
                     "have stored them or store them later")
    if result.written:
        parts.append(f"{len(result.written)} of {total} written (in `records`)")
    cause = f" [last Kafka client error: {why}]" if why else ""
    return f"Kafka: {'; '.join(parts)}{cause}. {retry_advice(result)}."


def body(result: Outcome, timeout_s: float, why: str | None = None) -> dict:
    """The 503 body's record lists: `records` (written, as in a 202), `not_written` and `unknown`, per record."""
    return {
        "detail": message(result, timeout_s, why),
        "records": [{"index": s.index, "post_id": s.post_id, "topic": r.topic, "partition": r.partition,
                     "offset": r.offset} for s, r in result.written],
        "not_written": [{"index": s.index, "post_id": s.post_id, "topic": s.topic, "error": r.error,
                         "retry_safe": True} for s, r in result.not_written],
        "unknown": [{"index": s.index, "post_id": s.post_id, "topic": s.topic, "error": r.error if r else None,
                     "retry_safe": retry_safe(s)} for s, r in result.unknown],
    }


class NotWritten(ServiceError):
    """Some records of a write were not stored in Kafka, or their outcome is unknown; `body` says which."""

    def __init__(self, result: Outcome, timeout_s: float, why: str | None = None) -> None:
        self.body = body(result, timeout_s, why)
        super().__init__(self.body["detail"])
        self.outcome = result
