"""The speed worker: a kafka-python consumer group member that owns its partitions' state.

Each owned partition's records are validated and aggregated (speed/aggregate.py) into its in-memory
`PartitionState`; every `speed.flush_every_s` and on revocation its changes go to Redis with its next offset in
one atomic step (speed/checkpoint.py, speed/checkpoint.lua), so a crash loses at most what memory held since
the last checkpoint and the next owner replays exactly that. A new owner resumes from the checkpoint
(speed/positioning.py); a zombie's checkpoint is refused by its offset check. The kafka-python workarounds
live in speed/kafka_quirks.py; this module is the loop and the ownership of partitions.

kafka-python 3 runs the rebalance listener on its IO thread, the one that sends heartbeats, while this thread
waits in poll(). Loading or checkpointing partitions takes seconds under load, longer than a session: the
listener hands that work to a thread of its own and awaits it (`kafka_quirks.off_loop`), so heartbeats go on
(docs/decisions.md, "The rebalance listener works off kafka-python's IO loop"). The owned partitions are still
kept under one lock, so a revocation checkpoints a partition between two steps, never during one.
"""

from __future__ import annotations

import gc
import logging
import signal
import threading
import time
from operator import attrgetter
from typing import Any

import orjson
from kafka import TopicPartition
from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener
from kafka.coordinator.assignors.range import RangePartitionAssignor

from adapters import heap
from adapters import kafka as kafka_io
from adapters import redis as redis_io
from speed import kafka_quirks, lean_records, metrics, positioning
from speed.aggregate import Increments, parse_batch, step_increments
from speed.cells import CellCache
from speed.checkpoint import Checkpointer, Outcome, Owned
from speed.epoch import Epoch
from speed.errors import DataLost
from speed.logs import event
from speed.partition_store import PartitionStore
from speed.replay import replay_of
from speed.state import StateLimits, event_key
from trendcore.errors import ConfigError, ServiceError, TrendsError
from trendcore.keys import KeySpace
from trendcore.settings import Settings
from trendcore.windows import HOUR_MS

log = logging.getLogger("speed.worker")
_OFFSET, _OFFSET_KEY_VALUE = attrgetter("offset"), attrgetter("offset", "key", "value")  # per record, in C


def now_ms() -> int:
    return int(time.time() * 1000)


def _names(tps) -> list[str]:
    return [f"{tp.topic}:{tp.partition}" for tp in tps]


class _Listener(AsyncConsumerRebalanceListener):
    """Checkpoint revoked partitions before giving them up; load and seek assigned ones (each off the IO loop)."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    async def on_partitions_revoked(self, revoked) -> None:
        event(log, "partitions_revoked", partitions=_names(revoked))
        await kafka_quirks.off_loop(self.worker.release, list(revoked))
        self.worker.unpositioned.difference_update(revoked)
        self.worker.stall.revoked()

    async def on_partitions_lost(self, lost) -> None:
        """The group moved on without us (session expired): another owner may have loaded them already, so
        drop their memory without the checkpoint a revocation writes."""
        event(log, "partitions_lost", level=logging.WARNING, partitions=_names(lost))
        await kafka_quirks.off_loop(self.worker.forget, list(lost))
        self.worker.unpositioned.difference_update(lost)
        self.worker.stall.revoked()

    async def on_partitions_assigned(self, assigned) -> None:
        event(log, "partitions_assigned", partitions=_names(assigned))
        self.worker.stall.assigned()
        await kafka_quirks.off_loop(self.worker.position, list(assigned))


class Worker:
    """One member of the speed consumer group."""

    def __init__(self, settings: Settings, name: str = "speed") -> None:
        self.settings, self.speed, self.name = settings, settings.speed, name
        kafka = settings.kafka
        self.posts_topic, self.engagements_topic = kafka.posts_topic, kafka.engagements_topic
        self.kinds = {kafka.posts_topic: "post", kafka.engagements_topic: "engagement"}
        self.keys = KeySpace.of(settings)
        client = redis_io.client(settings.redis)
        self.epochs = Epoch(client, self.keys.epoch(self.speed.group))
        self.store = PartitionStore(client, self.keys, (kafka.posts_topic, kafka.engagements_topic))
        self.checkpointer = Checkpointer(self.keys, self.speed.post_ttl_s, self.speed.rebuild_flag_ttl_s)
        self.rules = positioning.StateRules(settings.sketch.shape, StateLimits.of(self.speed), self.keys,
                                            self.speed.seen_post_ids, kafka.posts_topic, self.speed.seen_event_ids)
        self.cells = CellCache(settings.sketch.shape)
        self.weights = self.speed.engagement_weights()
        self.owned: dict[TopicPartition, Owned] = {}
        self.lock = threading.RLock()  # the poll loop and the rebalance listener
        self.epoch: str | None = None  # the sentinel's token when last positioned
        self.unpositioned: set[TopicPartition] = set()  # assigned, paused until positioning works
        self.stall = kafka_quirks.StallWatch.for_session(self.speed.session_timeout_ms)
        self.stopping = False
        self.dlq = kafka_io.producer(kafka, **{"linger.ms": 5})
        self.consumer = kafka_io.consumer(
            kafka, group_id=self.speed.group, client_id=name, enable_auto_commit=False,
            auto_offset_reset="earliest", session_timeout_ms=self.speed.session_timeout_ms,
            heartbeat_interval_ms=self.speed.heartbeat_ms, **self.speed.consumer_tuning(),
            # posts and engagements are keyed by post id with the same partitioner and partition count: the
            # range assignor gives the owner of posts partition p engagements partition p too, so an
            # engagement reaches the state of the partition that took its post
            partition_assignment_strategy=(RangePartitionAssignor,), kafka_client=kafka_quirks.net_client,
        )
        if self.speed.lean_records:
            lean_records.install(self.consumer)
        # A second, group-less client for offset look-ups: the group consumer's own blocking calls are not
        # allowed inside its rebalance listener.
        self.lookup = kafka_io.consumer(kafka, client_id=f"{name}-lookup", kafka_client=kafka_quirks.net_client)

    def pair_of(self, tp: TopicPartition) -> tuple[TopicPartition, TopicPartition | None]:
        """The partition whose state a checkpoint of `tp` writes (the posts partition of its number, when owned)
        and the engagements partition that goes with it (None: not owned)."""
        posts = TopicPartition(self.posts_topic, tp.partition)
        engagements = TopicPartition(self.engagements_topic, tp.partition)
        if posts not in self.owned:
            return tp, None
        return posts, engagements if engagements in self.owned else None

    # --- positioning ---------------------------------------------------------------------------

    def load_and_seek(self, tps: list[TopicPartition]) -> None:
        """Load the partitions' checkpoints and seek to their offsets (every assigned partition when the epoch
        changed: the others' memory and positions no longer match what Redis holds)."""
        if not tps:
            return
        with self.lock:
            epoch = self.epochs.ensure()
            assigned = [(tp.topic, tp.partition) for tp in self.consumer.assignment()]
            chosen = positioning.widened([(tp.topic, tp.partition) for tp in tps], assigned, epoch, self.epoch)
            chosen = positioning.paired(chosen, assigned, (self.posts_topic, self.engagements_topic))
            owned = positioning.position(chosen, self.store, self._origins, self.rules, now_ms())
            self._mark_replays(owned)
            for (topic, partition), one in owned.items():
                tp = TopicPartition(topic, partition)
                self.owned[tp] = one
                self.consumer.seek(tp, one.stored)
            self.epoch = epoch
        event(log, "seeked", epoch=epoch, stored={f"{t}:{p}": o.stored for (t, p), o in owned.items()},
              fresh=[f"{t}:{p}" for (t, p), o in owned.items() if o.fresh])

    def _mark_replays(self, owned: dict[tuple[str, int], Owned]) -> None:
        """Which positioned partitions are rebuilding (speed/replay.py): the log's end now is the replay's
        target."""
        tps = [TopicPartition(topic, partition) for topic, partition in owned]
        with kafka_io.kafka_errors("reading log end offsets"):
            ends = self.lookup.end_offsets(tps) if tps else {}
        replaying: dict[str, list[int]] = {}
        for tp in tps:
            one = owned[(tp.topic, tp.partition)]
            one.replay = replay_of(one.fresh, one.stored, ends[tp], self.speed.rebuild_lag_records)
            if one.replay is not None:
                replaying[f"{tp.topic}:{tp.partition}"] = [one.replay.start, one.replay.target]
        if replaying:
            event(log, "rebuilding", partitions=replaying)

    def _origins(self, pairs: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """First offset whose timestamp is within the kept hours; the log start when the look-up finds none.
        Kafka can answer "none" for partitions being written to: starting at the end would skip records never
        taken, while replaying old ones only counts them as too late."""
        tps = [TopicPartition(t, p) for t, p in pairs]
        since = now_ms() - self.speed.keep_hours * HOUR_MS
        with kafka_io.kafka_errors("finding the first offsets of the kept hours"):
            found = self.lookup.offsets_for_times({tp: since for tp in tps})
            starts = self.lookup.beginning_offsets(tps)
        return {(tp.topic, tp.partition): (found[tp].offset if found.get(tp) is not None else starts[tp])
                for tp in tps}

    def position(self, tps: list[TopicPartition]) -> None:
        """Load and seek assigned partitions; when Redis or Kafka fails meanwhile, forget them, pause them and
        let the loop retry (the listener must not raise: kafka-python would re-raise it from poll())."""
        try:
            self.load_and_seek(tps)
        except Exception as exc:  # any failure here only defers the positioning
            self.forget(tps)
            self.consumer.pause(*tps)
            self.unpositioned.update(tps)
            event(log, "seek_deferred", level=logging.WARNING, error=repr(exc), partitions=_names(tps))
            return
        self.consumer.resume(*tps)  # kafka-python may keep a paused state across a rebalance
        self.unpositioned.difference_update(tps)

    def _retry_positioning(self) -> None:
        """Position partitions whose positioning failed, then fetch them again."""
        self.unpositioned &= self.consumer.assignment()
        if not self.unpositioned:
            return
        self.position(list(self.unpositioned))
        if self.unpositioned:
            time.sleep(1.0)  # Redis or Kafka still failing: do not spin

    def release(self, tps: list[TopicPartition]) -> None:
        """Checkpoint revoked partitions (synchronously: the next owner loads what this writes) and forget
        them. A failed or refused checkpoint is logged: the next owner replays from what Redis holds."""
        dropped = False
        with self.lock:
            for tp in tps:
                if tp not in self.owned:
                    continue
                try:
                    self._checkpoint(tp, reposition=False)
                except TrendsError as exc:
                    event(log, "release_checkpoint_failed", level=logging.WARNING, error=str(exc),
                          partition=f"{tp.topic}:{tp.partition}")
                self.owned.pop(tp, None)
                dropped = True
        if dropped:
            heap.trim()  # their state's pages back to the OS, not kept at the high-water mark

    def forget(self, tps: list[TopicPartition]) -> None:
        """Drop partitions' memory unwritten: the next owner (or load) replays from what Redis holds."""
        with self.lock:
            dropped = sum(self.owned.pop(tp, None) is not None for tp in tps)
        if dropped:
            heap.trim()

    def rebuild(self) -> None:
        """Redis lost data: take (or create) the new epoch and position every assigned partition again (if
        Redis is unreachable meanwhile, the partitions wait paused and the loop retries)."""
        metrics.REBUILDS.inc()
        event(log, "rebuild", level=logging.WARNING, old_epoch=self.epoch)
        assigned = list(self.consumer.assignment())
        self.forget(assigned)
        self.position(assigned)

    def _recover(self) -> None:
        """After an unknown outcome (Redis or Kafka error), position everything again from Redis."""
        try:
            if self.epochs.current() != self.epoch:
                self.rebuild()
            else:
                self.position(list(self.consumer.assignment()))
        except ServiceError as exc:
            # Redis is still down: the consumer's positions are past records no checkpoint holds. Pause
            # everything until a positioning works.
            assigned = list(self.consumer.assignment())
            self.forget(assigned)
            self.consumer.pause(*assigned)
            self.unpositioned.update(assigned)
            event(log, "service_error", level=logging.ERROR, error=str(exc))

    # --- the loop ------------------------------------------------------------------------------

    def run(self) -> None:
        """Poll and take records until SIGTERM; then checkpoint everything and leave the group cleanly."""
        gc.set_threshold(self.speed.gc_threshold, 10, 10)  # the process is this loop: see SpeedSettings
        kafka_quirks.await_metadata(self.consumer, self.kinds)
        counts = {topic: len(self.consumer.partitions_for_topic(topic)) for topic in self.kinds}
        problem = positioning.partition_count_problem(counts, self.settings.kafka.partitions)
        if problem is not None:
            raise ConfigError(problem)
        self._subscribe()
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        event(log, "started", worker=self.name, group=self.speed.group)
        last_check = 0.0
        try:
            while not self.stopping:
                if self.unpositioned:
                    self._retry_positioning()
                self._take_polled(kafka_quirks.poll_or_wait(self.consumer, self.speed.poll_timeout_ms,
                                                            self.speed.max_batch_records))
                if time.monotonic() - last_check >= 1.0:
                    last_check = time.monotonic()
                    self._housekeeping()
        finally:
            self.close()

    def _subscribe(self) -> None:
        self.consumer.subscribe(list(self.kinds), listener=_Listener(self))

    def _stop(self, signum, _frame) -> None:
        event(log, "stopping", signal=signum)
        self.stopping = True

    def _take_polled(self, polled: dict[TopicPartition, list[Any]]) -> None:
        """Add each partition's records to its state, in steps; checkpoint the partitions whose flush interval
        passed. Redis or Kafka failing: position everything again from Redis."""
        try:
            # posts first: an engagement polled with its post then finds the post held
            for tp, records in sorted(polled.items(), key=lambda item: item[0].topic != self.posts_topic):
                if records:
                    self._take(tp, records)
            self._flush_due()
        except DataLost:
            self.rebuild()
        except ServiceError as exc:
            event(log, "service_error", level=logging.ERROR, error=str(exc))
            time.sleep(1.0)
            self._recover()

    def _housekeeping(self) -> None:
        """Rejoin a stalled rebalance, notice Redis data loss while idle, export lag, commit positions (for lag
        monitoring only), checkpoint the partitions whose flush interval passed while idle."""
        waited = self.stall.stalled()
        if waited is not None:
            event(log, "rebalance_stalled", level=logging.WARNING, seconds=round(waited))
            metrics.STALLED_REBALANCES.inc()
            self.consumer.unsubscribe()  # leaves the group and resets the member: the next poll joins anew
            self._subscribe()
        try:
            lost = self.epoch is not None and self.epochs.current() != self.epoch
        except ServiceError as exc:  # Redis unreachable: the next checkpoint or positioning notices it too
            event(log, "service_error", level=logging.ERROR, error=str(exc))
            return
        try:
            if lost:
                self.rebuild()
            self._flush_due()
        except DataLost:
            self.rebuild()
        except ServiceError as exc:
            event(log, "service_error", level=logging.ERROR, error=str(exc))
            self._recover()
        self._export_lag()

    def _export_lag(self) -> None:
        for tp in self.consumer.assignment():
            high = self.consumer.highwater(tp)
            if high is not None:
                metrics.LAG.labels(tp.topic, str(tp.partition)).set(max(0, high - self.consumer.position(tp)))
        try:
            self.consumer.commit_async()
        except Exception as exc:  # lag monitoring must never stop the worker
            event(log, "commit_failed", level=logging.DEBUG, error=str(exc))

    def close(self) -> None:
        """Checkpoint every owned partition, flush the dead-letter producer, leave the group."""
        try:
            try:
                self._flush_due(force=True)
            except TrendsError as exc:  # the next owner replays from what Redis holds
                event(log, "service_error", level=logging.ERROR, error=str(exc))
            self.dlq.flush()
        finally:
            self.consumer.close(autocommit=False)
            self.lookup.close()
            event(log, "stopped", worker=self.name)

    # --- taking records --------------------------------------------------------------------------

    def _take(self, tp: TopicPartition, records: list[Any]) -> None:
        """Add one partition's polled records (those memory already holds are skipped; a gap, records the log
        deleted before they were taken, is counted)."""
        with self.lock:
            owned = self.owned.get(tp)
            if owned is None:  # revoked, or not positioned yet
                return
            cut = positioning.cut(owned.next_offset, list(map(_OFFSET, records)))
            if cut.skip and self._beyond_log_end(tp, owned):
                cut = positioning.Cut(0, 0)
            records = records[cut.skip:]
            if not records:
                return
            if cut.gap:
                metrics.SKIPPED.labels(tp.topic).inc(cut.gap)
                event(log, "offsets_skipped", level=logging.WARNING, partition=f"{tp.topic}:{tp.partition}",
                      expected=owned.next_offset, first=records[0].offset)
                owned.next_offset = records[0].offset
            size = self.speed.max_step_records
            for first in range(0, len(records), size):
                self._add_step(tp, owned, records[first:first + size])

    def _beyond_log_end(self, tp: TopicPartition, owned: Owned) -> bool:
        """True (and the partition's next offset moved to the log start) when its next offset is past the log's
        end: the topic was recreated, so the consumer reset to the log start. Its records are taken as new
        (`speed_offsets_outside_log_total` counts the event)."""
        with kafka_io.kafka_errors("reading log start and end offsets"):
            start, end = self.lookup.beginning_offsets([tp])[tp], self.lookup.end_offsets([tp])[tp]
        if owned.next_offset <= end:
            return False
        metrics.OFFSETS_OUTSIDE_LOG.labels(tp.topic, str(tp.partition)).inc()
        event(log, "offset_outside_log", level=logging.WARNING, partition=f"{tp.topic}:{tp.partition}",
              stored=owned.next_offset, log_start=start, log_end=end, skipped=0)
        owned.next_offset = start
        return True

    def _add_step(self, tp: TopicPartition, owned: Owned, records: list[Any]) -> None:
        """Parse, dead-letter (flushed before any checkpoint moves the offset past them), leave out posts the
        partition took before, aggregate and add to the state."""
        clock = now_ms()
        kind = self.kinds[tp.topic]
        parsed = parse_batch(map(_OFFSET_KEY_VALUE, records), kind, clock,
                             self.settings.validation.max_future_s * 1000)
        if parsed.dead:
            self._dead_letter(tp, parsed.dead, clock)
        known = frozenset(owned.seen.known(p.post_id for p in parsed.posts)) if owned.seen else frozenset()
        inc = step_increments(kind, parsed, known, clock, self.speed.keep_minutes, self.speed.keep_hours,
                              self.weights)
        if owned.state is not None:
            owned.state.add(inc, self.cells)
        if owned.seen is not None:
            owned.seen.add([p.post_id for p in parsed.posts if p.post_id not in known], parsed.start)
        unseen = self._engage(tp, inc, parsed.start) if kind == "engagement" else 0
        owned.next_offset = parsed.next
        self._count(tp, len(records), inc, unseen)

    def _engage(self, tp: TopicPartition, inc: Increments, start: int) -> int:
        """Route an engagements step to the state of the posts partition of the same number (the range assignor
        makes this worker its owner); return the engaged posts it does not hold (left to the batch layer)."""
        posts = self.owned.get(TopicPartition(self.posts_topic, tp.partition))
        if posts is None or posts.state is None:
            return len(inc.engagement.keys() | inc.engagement_ids.keys())
        named = [event_key(pid, eid) for pid, ids in inc.engagement_ids.items() for eid in ids]
        known = posts.events.known(named) if posts.events is not None else set()
        engaged = posts.state.engage(inc.engagement, inc.engagement_ids, known)
        if posts.events is not None:
            posts.events.add(engaged.events, start)
        return engaged.unseen

    def _dead_letter(self, tp: TopicPartition, dead, clock: int) -> None:
        """Produce and flush every dead letter before a checkpoint moves the offset past them."""
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

    # --- checkpoints -----------------------------------------------------------------------------

    def _flush_due(self, force: bool = False) -> None:
        """Checkpoint every owned partition with news whose flush interval passed (all of them: `force`)."""
        now, every_ms = now_ms(), self.speed.flush_every_s * 1000
        with self.lock:
            due = [tp for tp, o in self.owned.items() if o.pending() and (force or o.flush_due(now, every_ms))]
            for tp in due:
                if tp in self.owned:  # a refusal re-positions, which may change the owned set
                    self._checkpoint(tp)

    def _checkpoint(self, tp: TopicPartition, reposition: bool = True) -> None:
        """One partition's checkpoint (with the engagements partition of its number: `pair_of`). Refused as
        stale (another owner moved on): their memory is dropped and, with `reposition`, loaded again from
        Redis. Any other failure drops it too and propagates."""
        main, pair = self.pair_of(tp)
        both = [main, *([pair] if pair is not None else [])]
        paired = self.owned.get(pair) if pair is not None else None
        try:
            step = self.checkpointer.step(self.store, self.owned[main], now_ms, paired)
        except Exception:
            self.forget(both)
            raise
        if step.outcome is Outcome.WRITTEN:
            metrics.FLUSH.observe(step.seconds)
        elif step.outcome is Outcome.REFUSED:
            metrics.REFUSED.inc()
            event(log, "stale_checkpoint_refused", level=logging.WARNING, partition=f"{tp.topic}:{tp.partition}",
                  start=step.payload.start, reason=step.reason)
            self.forget(both)
            assigned = [one for one in both if one in self.consumer.assignment()]
            if reposition and assigned:
                self.position(assigned)
