"""The speed worker: a kafka-python consumer group member that applies each partition's micro-batch
to Redis in one atomic step, with the partition's next offset (exactly once), and dead-letters
invalid records before the offset moves past them."""

from __future__ import annotations

import gc
import logging
import signal
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import orjson
from kafka import ConsumerRebalanceListener, TopicPartition
from kafka.errors import KafkaError

from adapters import kafka as kafka_io
from adapters import redis as redis_io
from speed import metrics
from speed.aggregate import Increments, Parsed, parse_batch, step_increments
from speed.cells import CellCache
from speed.errors import DataLost, Duplicates, StaleBatch
from speed.logs import event
from speed.recent import RecentIds
from speed.writer import Target, Writer, build_payload
from trendcore.errors import ServiceError
from trendcore.keys import KeySpace
from trendcore.settings import Settings
from trendcore.windows import HOUR_MS

log = logging.getLogger("speed.worker")


def now_ms() -> int:
    return int(time.time() * 1000)


class _Listener(ConsumerRebalanceListener):
    """Seek newly assigned partitions to the Redis-stored offsets. Revocation does not wait for the
    step in flight: the listener runs on kafka-python's IO thread, where blocking for a script's
    time stalls the group's joins; a step that runs after its partition moved on is refused by its
    offset check instead."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def on_partitions_revoked(self, revoked) -> None:
        event(log, "partitions_revoked", partitions=[f"{tp.topic}:{tp.partition}" for tp in revoked])
        self.worker.unpositioned.difference_update(revoked)
        self.worker.rebalancing_since = time.monotonic()

    def on_partitions_assigned(self, assigned) -> None:
        event(log, "partitions_assigned", partitions=[f"{tp.topic}:{tp.partition}" for tp in assigned])
        self.worker.rebalancing_since = None
        self.worker.position(list(assigned))


@dataclass(frozen=True)
class _Prepared:
    """One step ready for Redis: partition, start offset, size, increments, the parsed records, clock,
    epoch and post ids left out as known duplicates (to rebuild it without more), and the payload."""

    tp: TopicPartition
    start: int
    records: int
    inc: Increments
    parsed: Parsed
    clock: int
    epoch: str
    known: frozenset[str]
    payload: bytes


@dataclass(frozen=True)
class _Step:
    """A step submitted to the apply thread."""

    prep: _Prepared
    future: Future


class Worker:
    """One member of the speed consumer group."""

    def __init__(self, settings: Settings, name: str = "speed") -> None:
        self.settings, self.speed, self.name = settings, settings.speed, name
        self.keys = KeySpace.of(settings.redis)
        self.writer = Writer(redis_io.client(settings.redis), self.speed.group, self.keys)
        self.cells = CellCache(settings.sketch.shape)
        self.recent = RecentIds(self.speed.recent_post_ids)
        self.dlq = kafka_io.producer(settings.kafka, **{"linger.ms": 5})
        self.kinds = {settings.kafka.posts_topic: "post", settings.kafka.engagements_topic: "engagement"}
        self.weights = self.speed.engagement_weights()
        self.epoch: str | None = None
        self.unpositioned: set[TopicPartition] = set()  # assigned, paused until seeked to the stored offset
        self.rebalancing_since: float | None = None  # revoked, not assigned again yet (monotonic s)
        # One apply thread: Redis runs step N while this thread prepares step N + 1 (the GIL is
        # released while waiting on the socket); at most one step is in flight, also across polls.
        self.applier = ThreadPoolExecutor(1, thread_name_prefix="apply")
        self.in_flight: _Step | None = None
        self.stopping = False
        self.consumer = kafka_io.consumer(
            settings.kafka, group_id=self.speed.group, client_id=name, enable_auto_commit=False,
            auto_offset_reset="earliest", session_timeout_ms=self.speed.session_timeout_ms,
            heartbeat_interval_ms=self.speed.heartbeat_ms, **self.speed.consumer_tuning(), **self._assignment(),
        )
        # A second, group-less client for offset look-ups: the rebalance listener runs on the
        # group consumer's IO thread, where that consumer's own blocking calls are not allowed.
        self.lookup = kafka_io.consumer(settings.kafka, client_id=f"{name}-lookup")

    def _assignment(self) -> dict:
        """Consumer options choosing how the group assigns partitions (kafka-python's default here)."""
        return {}

    # --- offsets -------------------------------------------------------------------------------

    def seek_to_stored(self, tps: list[TopicPartition], check_log: bool = False) -> None:
        """Seek to the stored next offsets; where none is stored, to the start of the kept hours.
        `check_log` (after a stale refusal) first moves stored offsets the log no longer holds.

        A new epoch (Redis lost its data) widens the seek to every assigned partition: taking it for
        some partitions only would let the others go on from positions Redis no longer accounts for,
        and their older records would never be replayed. The epoch is taken once every seek is done."""
        if not tps:
            return
        epoch = self.writer.ensure_epoch()
        if self.epoch is not None and epoch != self.epoch:
            self.recent.clear()
            tps = sorted(set(tps) | self.consumer.assignment())
        stored = self.writer.stored_offsets([(tp.topic, tp.partition) for tp in tps])
        if check_log:
            stored = self._inside_log(tps, stored)
        missing = [tp for tp in tps if stored[(tp.topic, tp.partition)] is None]
        origins = self._origins(missing) if missing else {}
        for tp in tps:
            offset = stored[(tp.topic, tp.partition)]
            self.consumer.seek(tp, offset if offset is not None else origins[tp])
        self.epoch = epoch
        event(log, "seeked", epoch=self.epoch,
              stored={f"{t.topic}:{t.partition}": stored[(t.topic, t.partition)] for t in tps},
              origins={f"{t.topic}:{t.partition}": o for t, o in origins.items()})

    def _inside_log(self, tps: list[TopicPartition],
                    stored: dict[tuple[str, int], int | None]) -> dict[tuple[str, int], int | None]:
        """Stored offsets the log no longer holds, moved to the log start. Seeking there would make
        the consumer reset to the log start, whose steps the offset check refuses forever: records
        deleted by retention before they were applied, or a topic recreated with fewer records.
        The move is a check-and-set; the records deleted unapplied are counted in a metric. Checked
        after a stale refusal only, which such an offset always causes: not on every assignment, to
        keep Kafka look-ups out of the rebalance listener."""
        held = [tp for tp in tps if stored[(tp.topic, tp.partition)] is not None]
        if not held:
            return stored
        with kafka_io.kafka_errors("reading log start and end offsets"):
            starts, ends = self.lookup.beginning_offsets(held), self.lookup.end_offsets(held)
        for tp in held:
            at = stored[(tp.topic, tp.partition)]
            if starts[tp] <= at <= ends[tp]:
                continue
            if self.writer.move_offset(tp.topic, tp.partition, at, starts[tp]):
                skipped = starts[tp] - at if at < starts[tp] else 0
                metrics.OFFSETS_OUTSIDE_LOG.labels(tp.topic, str(tp.partition)).inc()
                metrics.SKIPPED.labels(tp.topic).inc(skipped)
                event(log, "offset_outside_log", level=logging.WARNING, partition=f"{tp.topic}:{tp.partition}",
                      stored=at, log_start=starts[tp], log_end=ends[tp], skipped=skipped)
            stored.update(self.writer.stored_offsets([(tp.topic, tp.partition)]))
        return stored

    def position(self, tps: list[TopicPartition]) -> None:
        """Seek assigned partitions to the stored offsets; when Redis or Kafka fails meanwhile, pause
        them and let the loop retry. The rebalance listener must not raise: kafka-python would
        re-raise it from poll() and stop the worker."""
        try:
            self.seek_to_stored(tps)
        except Exception as exc:  # any failure here only defers the seek
            self.consumer.pause(*tps)
            self.unpositioned.update(tps)
            event(log, "seek_deferred", level=logging.WARNING, error=repr(exc),
                  partitions=[f"{tp.topic}:{tp.partition}" for tp in tps])
            return
        self.consumer.resume(*tps)  # kafka-python may keep a paused state across a rebalance
        self.unpositioned.difference_update(tps)

    def _retry_positioning(self) -> None:
        """Seek partitions whose seek failed during a rebalance, then fetch them again."""
        self.unpositioned &= self.consumer.assignment()
        if not self.unpositioned:
            return
        self.position(list(self.unpositioned))
        if self.unpositioned:
            time.sleep(1.0)  # Redis or Kafka still failing: do not spin

    def _origins(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """First offset whose timestamp is within the kept hours; the log start when the look-up finds
        none. Kafka can answer "none" for partitions being written to: starting at the end would skip
        unapplied records, while replaying old ones only counts them as too late."""
        since = now_ms() - self.speed.keep_hours * HOUR_MS
        with kafka_io.kafka_errors("finding the first offsets of the kept hours"):
            found = self.lookup.offsets_for_times({tp: since for tp in tps})
            starts = self.lookup.beginning_offsets(tps)
        return {tp: (found[tp].offset if found.get(tp) is not None else starts[tp]) for tp in tps}

    def rebuild(self) -> None:
        """Redis lost data: take (or create) the new epoch and replay every assigned partition (if
        Redis is unreachable meanwhile, the partitions wait paused and the loop retries)."""
        metrics.REBUILDS.inc()
        event(log, "rebuild", level=logging.WARNING, old_epoch=self.epoch)
        self._abandon()  # its outcome no longer matters: everything is replayed from the stored offsets
        self.recent.clear()
        self.position(list(self.consumer.assignment()))

    # --- the loop ------------------------------------------------------------------------------

    def run(self) -> None:
        """Poll and apply until SIGTERM; then leave the group cleanly."""
        gc.set_threshold(self.speed.gc_threshold, 10, 10)  # the process is this loop: see SpeedSettings
        self._await_metadata()
        self._subscribe()
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        event(log, "started", worker=self.name, group=self.speed.group)
        last_check = 0.0
        try:
            while not self.stopping:
                self._cycle()
                if time.monotonic() - last_check >= 1.0:
                    last_check = time.monotonic()
                    self._housekeeping()
        finally:
            self.close()

    def _cycle(self) -> None:
        """One turn of the loop: retry deferred seeks, poll, apply (housekeeping aside)."""
        if self.unpositioned:
            self._retry_positioning()
        self._apply_polled(self._poll())

    def _poll(self) -> dict[TopicPartition, list[Any]]:
        """One poll; nothing when it raises a retriable Kafka error. kafka-python 3.0.12 raises
        KafkaConnectionError from poll() while the broker is down (its coordinator look-up re-raises the
        failed metadata refresh): the worker waits for the broker instead of exiting. Exactly once does
        not rest on the raising poll leaving positions alone: a step from a moved position is refused
        by its offset check, which re-seeks."""
        try:
            return self.consumer.poll(timeout_ms=self.speed.poll_timeout_ms, max_records=self.speed.max_batch_records)
        except KafkaError as exc:
            if not exc.retriable:
                raise
            metrics.KAFKA_UNAVAILABLE.inc()
            event(log, "kafka_unavailable", level=logging.WARNING, error=repr(exc))
            time.sleep(1.0)  # the broker is down: do not spin
            return {}

    def _subscribe(self) -> None:
        self.consumer.subscribe(list(self.kinds), listener=_Listener(self))

    def _unstick_rebalance(self) -> None:
        """Rejoin when a rebalance never completes. kafka-python 3.0.12 drops a join whose SyncGroup
        answer arrives after poll() timed out, if the leader's assignment meanwhile cleared its
        metadata-change flag: no assignment ever follows the revocation."""
        stall_s = max(30.0, 3 * self.speed.session_timeout_ms / 1000)
        if self.rebalancing_since is None or time.monotonic() - self.rebalancing_since < stall_s:
            return
        event(log, "rebalance_stalled", level=logging.WARNING,
              seconds=round(time.monotonic() - self.rebalancing_since))
        metrics.STALLED_REBALANCES.inc()
        self.rebalancing_since = time.monotonic()  # re-armed: try again if this rejoin stalls too
        self.consumer.unsubscribe()  # leaves the group and resets the member: the next poll joins anew
        self._subscribe()

    def _await_metadata(self, timeout_s: float = 60.0) -> None:
        """Know every topic's partitions before joining: a kafka-python 3 group leader that assigns
        without topic metadata hands out nothing and never rebalances again."""
        deadline = time.monotonic() + timeout_s
        for topic in self.kinds:
            while not self.consumer.partitions_for_topic(topic):
                if time.monotonic() > deadline:
                    raise ServiceError(f"Kafka: no metadata for topic {topic} after {timeout_s:.0f} s")
                time.sleep(0.2)

    def _stop(self, signum, _frame) -> None:
        event(log, "stopping", signal=signum)
        self.stopping = True

    def close(self) -> None:
        """Settle the step in flight, flush the dead-letter producer, leave the group."""
        try:
            try:
                self._settle_in_flight(set())
            except (DataLost, ServiceError) as exc:  # its partitions are re-read from Redis by their next owner
                event(log, "service_error", level=logging.ERROR, error=str(exc))
            self.applier.shutdown(wait=True)
            self.dlq.flush()
        finally:
            self.consumer.close(autocommit=False)
            self.lookup.close()
            event(log, "stopped", worker=self.name)

    def _apply_polled(self, polled: dict[TopicPartition, list[Any]]) -> None:
        """Apply each partition's records in steps, preparing the next step (parse, aggregate,
        dead letters) while Redis runs the previous one. The last step stays in flight across the
        next poll, so kafka-python fetches and decodes while Redis runs it; an empty poll, a
        revocation, a rebuild or shutdown settles it. Exactly once does not rest on settling: a
        step whose partition moved on is refused by its offset check."""
        assignment = self.consumer.assignment()
        refused: set[TopicPartition] = set()
        size = self.speed.max_step_records
        try:
            for tp, records in polled.items():
                if tp not in assignment or not records:
                    continue
                for first in range(0, len(records), size):
                    if tp in refused:
                        break
                    step = self._prepare(tp, records[first:first + size])
                    self._settle_in_flight(refused)
                    if tp not in refused:
                        self.in_flight = self._submit(step)
            if not any(polled.values()):
                self._settle_in_flight(refused)  # idle: nothing to overlap with
        except DataLost:
            self.rebuild()
        except ServiceError as exc:
            self._abandon()
            self.recent.clear()  # the outcome is unknown: remember nothing unconfirmed
            event(log, "service_error", level=logging.ERROR, error=str(exc))
            time.sleep(1.0)
            self._recover()

    def _recover(self) -> None:
        """After an unknown outcome (Redis or Kafka error), re-seek everything to the stored offsets."""
        try:
            if self.writer.current_epoch() != self.epoch:
                self.rebuild()
            else:
                self.position(list(self.consumer.assignment()))
        except ServiceError as exc:
            # Redis is still down: the consumer's positions are past records never applied, and a
            # partition with no stored offset would take any start. Pause everything until a seek works.
            assigned = list(self.consumer.assignment())
            self.consumer.pause(*assigned)
            self.unpositioned.update(assigned)
            event(log, "service_error", level=logging.ERROR, error=str(exc))

    def _housekeeping(self) -> None:
        """Rejoin a stalled rebalance, notice Redis data loss while idle, export lag, commit positions
        for lag monitoring only."""
        self._unstick_rebalance()
        try:
            if self.epoch is not None and self.writer.current_epoch() != self.epoch:
                self.rebuild()
        except ServiceError as exc:
            event(log, "service_error", level=logging.ERROR, error=str(exc))
            return
        for tp in self.consumer.assignment():
            high = self.consumer.highwater(tp)
            if high is not None:
                metrics.LAG.labels(tp.topic, str(tp.partition)).set(max(0, high - self.consumer.position(tp)))
        try:
            self.consumer.commit_async()
        except Exception as exc:  # lag monitoring must never stop the worker
            event(log, "commit_failed", level=logging.DEBUG, error=str(exc))

    # --- one partition batch -------------------------------------------------------------------

    def _prepare(self, tp: TopicPartition, records: list[Any]) -> _Prepared:
        """Validate, dead-letter and pre-aggregate one step, leaving out posts this worker applied
        lately. The script refuses the step if Redis knows others (Duplicates); it is rebuilt without
        them. Its posts are remembered now, since the next step may be built before this one settles;
        every refusal or error forgets everything."""
        clock = now_ms()
        kind = self.kinds[tp.topic]
        parsed = parse_batch(((r.offset, r.key, r.value) for r in records), kind,
                             clock, self.settings.validation.max_future_s * 1000)
        if parsed.dead:
            self._dead_letter(tp, parsed.dead, clock)
        ids = [post.post_id for post in parsed.posts]
        known = frozenset(self.recent.known(ids))
        epoch = self.epoch or ""
        inc, payload = self._build(tp, parsed, clock, epoch, known)
        self.recent.add(ids)
        return _Prepared(tp, parsed.start, len(records), inc, parsed, clock, epoch, known, payload)

    def _build(self, tp: TopicPartition, parsed: Parsed, clock: int, epoch: str,
               known: frozenset[str]) -> tuple[Increments, bytes]:
        """Increments and the script payload of a parsed step, `known` post ids left out. `epoch` is
        the one the step was first built under: a rebuilt step must not pass under a newer one."""
        inc = step_increments(self.kinds[tp.topic], parsed, known, clock, self.speed.keep_minutes,
                              self.speed.keep_hours, self.weights)
        target = Target(self.keys.offset(self.speed.group, tp.topic, tp.partition), self.writer.epoch_key, epoch)
        return inc, build_payload(inc, target, parsed.start, parsed.next, self.speed, self.cells, self.keys)

    def _submit(self, step: _Prepared) -> _Step:
        """Start the atomic Redis step on the apply thread."""
        return _Step(step, self.applier.submit(self._apply, step.payload))

    def _apply(self, payload: bytes) -> int:
        """The Lua step, timed (on the apply thread, or on this one for a rebuilt step)."""
        started = time.perf_counter()
        orphans = self.writer.apply(payload)
        metrics.FLUSH.observe(time.perf_counter() - started)
        return orphans

    def _settle_in_flight(self, refused: set[TopicPartition]) -> None:
        """Settle the step in flight, if any (DataLost and ServiceError propagate)."""
        step = self.in_flight
        if step is None:
            return
        try:
            self._settle(step, refused)
        finally:
            self.in_flight = None

    def _settle(self, step: _Step, refused: set[TopicPartition]) -> None:
        """Wait for a step; count it; rebuild and apply it again without posts already applied;
        on a stale refusal seek its partition back (DataLost and ServiceError propagate)."""
        prep, inc = step.prep, step.prep.inc
        try:
            try:
                orphans = step.future.result()
            except Duplicates as dup:
                inc, orphans = self._apply_without(prep, dup)
        except StaleBatch as exc:
            metrics.REFUSED.inc()
            event(log, "stale_batch_refused", level=logging.WARNING, partition=f"{prep.tp.topic}:{prep.tp.partition}",
                  start=prep.start, reason=str(exc))
            refused.add(prep.tp)
            self.recent.clear()
            if prep.tp in self.consumer.assignment():  # settled after a poll that may have revoked it
                epoch = self.epoch
                self.seek_to_stored([prep.tp], check_log=True)
                if self.epoch != epoch:  # the rest of this poll was read from positions Redis forgot
                    raise DataLost("a new epoch seen while re-seeking a refused step") from exc
            return
        self._count(prep.tp, prep.records, inc, orphans)

    def _apply_without(self, prep: _Prepared, dup: Duplicates) -> tuple[Increments, int]:
        """Rebuild a step refused for holding posts already applied, without them, and apply it again
        (nothing else is in flight: the same offsets). A refusal names at most 4,000 posts, so this
        repeats until Redis takes the step; each round leaves more out."""
        known = set(prep.known)
        while True:
            known |= {self.keys.post_id_of(k) for k in dup.post_keys}
            inc, payload = self._build(prep.tp, prep.parsed, prep.clock, prep.epoch, frozenset(known))
            try:
                return inc, self._apply(payload)
            except Duplicates as again:
                dup = again

    def _abandon(self) -> None:
        """Let the step in flight finish and forget it (its outcome is re-read from Redis by the
        caller's recovery)."""
        step, self.in_flight = self.in_flight, None
        if step is not None:
            try:
                step.future.result()
            except Exception:  # the caller re-seeks to the stored offsets anyway
                pass

    def _dead_letter(self, tp: TopicPartition, dead, clock: int) -> None:
        """Produce and flush every dead letter before the atomic step moves the offset past them."""
        topic = self.settings.kafka.dead_letter_topic
        for letter in dead:
            doc = letter.document(tp.topic, tp.partition, clock)
            self.dlq.send(topic, f"{tp.topic}:{tp.partition}:{letter.offset}".encode(), orjson.dumps(doc))
        self.dlq.flush()
        metrics.DEAD.labels(tp.topic).inc(len(dead))

    def _count(self, tp: TopicPartition, records: int, inc: Increments, orphans: int) -> None:
        metrics.RECORDS.labels(tp.topic).inc(records)
        metrics.BATCH.observe(records)
        metrics.MENTIONS.inc(inc.mentions)
        metrics.DUPLICATES.inc(inc.duplicates)
        metrics.ORPHANS.inc(orphans)
        if inc.late_minute:
            metrics.LATE.labels("minute").inc(inc.late_minute)
        if inc.late_dropped:
            metrics.LATE.labels("dropped").inc(inc.late_dropped)

