"""The speed worker of `speed.state=partition` (issue #24, phase 1): partition state in memory, checkpointed.

Each owned partition's records are aggregated (speed/aggregate.py, as in the Lua path) and added to its
`PartitionState`; every `speed.flush_every_s` and on revocation its changes go to Redis with its next
offset in one atomic step (speed/checkpoint.py, speed/checkpoint.lua). A new owner resumes from that
checkpoint (speed/positioning.py); a zombie's checkpoint is refused as a stale batch is in the Lua path.
The Kafka workarounds (stalled rebalances, metadata before joining), dead letters, the epoch sentinel and
the housekeeping are the Lua worker's (speed/worker.py), inherited.

The rebalance listener runs on kafka-python's IO thread: it and the poll loop share the owned partitions
under one lock, so a revocation checkpoints a partition between two steps, never during one.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from kafka import ConsumerRebalanceListener, TopicPartition
from kafka.coordinator.assignors.range import RangePartitionAssignor

from adapters import kafka as kafka_io
from speed import metrics, positioning
from speed.aggregate import Increments, parse_batch, step_increments
from speed.checkpoint import Checkpointer, Owned
from speed.errors import DataLost, StaleBatch
from speed.logs import event
from speed.partition_store import PartitionStore
from speed.replay import replay_of
from speed.state import StateLimits, event_key
from speed.worker import Worker, now_ms
from trendcore.errors import ServiceError, TrendsError
from trendcore.settings import Settings

log = logging.getLogger("speed.worker")


class _Listener(ConsumerRebalanceListener):
    """Checkpoint revoked partitions before giving them up; load and seek assigned ones."""

    def __init__(self, worker: PartitionWorker) -> None:
        self.worker = worker

    def on_partitions_revoked(self, revoked) -> None:
        event(log, "partitions_revoked", partitions=[f"{tp.topic}:{tp.partition}" for tp in revoked])
        self.worker.release(list(revoked))
        self.worker.unpositioned.difference_update(revoked)
        self.worker.rebalancing_since = time.monotonic()

    def on_partitions_lost(self, lost) -> None:
        """The group moved on without us (session expired): another owner may have loaded them already, so
        drop their memory without the checkpoint a revocation writes."""
        event(log, "partitions_lost", level=logging.WARNING, partitions=[f"{tp.topic}:{tp.partition}" for tp in lost])
        self.worker.forget(list(lost))
        self.worker.unpositioned.difference_update(lost)
        self.worker.rebalancing_since = time.monotonic()

    def on_partitions_assigned(self, assigned) -> None:
        event(log, "partitions_assigned", partitions=[f"{tp.topic}:{tp.partition}" for tp in assigned])
        self.worker.rebalancing_since = None
        self.worker.position(list(assigned))


class PartitionWorker(Worker):
    """A member of the speed consumer group that owns its partitions' state (`speed.state=partition`)."""

    def __init__(self, settings: Settings, name: str = "speed") -> None:
        super().__init__(settings, name)
        kafka = settings.kafka
        self.posts_topic, self.engagements_topic = kafka.posts_topic, kafka.engagements_topic
        self.store = PartitionStore(self.writer.client, self.keys, (kafka.posts_topic, kafka.engagements_topic))
        self.checkpointer = Checkpointer(self.keys, self.speed.post_ttl_s, self.speed.rebuild_flag_ttl_s)
        self.rules = positioning.StateRules(settings.sketch.shape, StateLimits.of(self.speed), self.keys,
                                            self.speed.seen_post_ids, kafka.posts_topic, self.speed.seen_event_ids)
        self.owned: dict[TopicPartition, Owned] = {}
        self.lock = threading.RLock()  # the poll loop and the rebalance listener (kafka-python's IO thread)

    def _assignment(self) -> dict:
        """The range assignor, explicitly: posts and engagements are keyed by post id with the same partitioner
        and partition count, so it gives the owner of posts partition p engagements partition p too, and an
        engagement reaches the state of the partition that took its post."""
        return {"partition_assignment_strategy": (RangePartitionAssignor,)}

    def pair_of(self, tp: TopicPartition) -> tuple[TopicPartition, TopicPartition | None]:
        """The partition whose state a checkpoint of `tp` writes (the posts partition of its number, when owned)
        and the engagements partition that goes with it (None: not owned)."""
        posts = TopicPartition(self.posts_topic, tp.partition)
        engagements = TopicPartition(self.engagements_topic, tp.partition)
        if posts not in self.owned:
            return tp, None
        return posts, engagements if engagements in self.owned else None

    def _subscribe(self) -> None:
        self.consumer.subscribe(list(self.kinds), listener=_Listener(self))

    # --- positioning ---------------------------------------------------------------------------

    def seek_to_stored(self, tps: list[TopicPartition], check_log: bool = False) -> None:
        """Load the partitions' checkpoints and seek to their offsets (every assigned partition when the
        epoch changed). `check_log` is the Lua path's; here a gap in the log is noticed when polled."""
        if not tps:
            return
        with self.lock:
            epoch = self.writer.ensure_epoch()
            assigned = [(tp.topic, tp.partition) for tp in self.consumer.assignment()]
            chosen = positioning.widened([(tp.topic, tp.partition) for tp in tps], assigned, epoch, self.epoch)
            chosen = positioning.paired(chosen, assigned, (self.posts_topic, self.engagements_topic))
            owned = positioning.position(chosen, self.store, self._origins_of, self.rules, now_ms())
            self._mark_replays(owned)
            for (topic, partition), one in owned.items():
                tp = TopicPartition(topic, partition)
                self.owned[tp] = one
                self.consumer.seek(tp, one.stored)
            self.epoch = epoch
        event(log, "seeked", epoch=epoch, stored={f"{t}:{p}": o.stored for (t, p), o in owned.items()},
              fresh=[f"{t}:{p}" for (t, p), o in owned.items() if o.fresh])

    def _mark_replays(self, owned: dict[tuple[str, int], Owned]) -> None:
        """Which positioned partitions are rebuilding (speed/replay.py): the log's end now is the replay's target.
        The group-less client looks it up (this runs in the rebalance listener too)."""
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

    def _origins_of(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """`Worker._origins` for (topic, partition) pairs."""
        found = self._origins([TopicPartition(t, p) for t, p in tps])
        return {(tp.topic, tp.partition): offset for tp, offset in found.items()}

    def position(self, tps: list[TopicPartition]) -> None:
        """Load and seek assigned partitions; when Redis or Kafka fails meanwhile, forget them, pause them
        and let the loop retry (the listener must not raise)."""
        try:
            self.seek_to_stored(tps)
        except Exception as exc:  # any failure here only defers the positioning
            with self.lock:
                for tp in tps:
                    self.owned.pop(tp, None)
            self.consumer.pause(*tps)
            self.unpositioned.update(tps)
            event(log, "seek_deferred", level=logging.WARNING, error=repr(exc),
                  partitions=[f"{tp.topic}:{tp.partition}" for tp in tps])
            return
        self.consumer.resume(*tps)
        self.unpositioned.difference_update(tps)

    def release(self, tps: list[TopicPartition]) -> None:
        """Checkpoint revoked partitions (synchronously: the next owner loads what this writes) and forget
        them. A failed or refused checkpoint is logged: the next owner replays from what Redis holds."""
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

    def forget(self, tps: list[TopicPartition]) -> None:
        """Drop lost partitions' memory unwritten: the next owner replays from what Redis holds."""
        with self.lock:
            for tp in tps:
                self.owned.pop(tp, None)

    # --- the loop ------------------------------------------------------------------------------

    def _apply_polled(self, polled: dict[TopicPartition, list[Any]]) -> None:
        """Add each partition's records to its state, in steps; checkpoint the partitions whose flush
        interval passed. Redis or Kafka failing: re-position everything from Redis."""
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

    def _take(self, tp: TopicPartition, records: list[Any]) -> None:
        """Add one partition's polled records (those memory already holds are skipped; a gap, records the
        log deleted before they were taken, is counted)."""
        with self.lock:
            owned = self.owned.get(tp)
            if owned is None:  # revoked, or not positioned yet
                return
            cut = positioning.cut(owned.next_offset, [r.offset for r in records])
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
        """True (and the partition's next offset moved to the log start) when its next offset is past the
        log's end: the topic was recreated, so the consumer reset to the log start. Its records are taken
        as new (counted again, as the Lua path does: `speed_offsets_outside_log_total`)."""
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
        """Parse, dead-letter (flushed before any checkpoint moves the offset past them), leave out posts
        the partition took before, aggregate and add to the state."""
        clock = now_ms()
        kind = self.kinds[tp.topic]
        parsed = parse_batch(((r.offset, r.key, r.value) for r in records), kind, clock,
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

    def _flush_due(self, force: bool = False) -> None:
        """Checkpoint every owned partition with news whose flush interval passed (all of them: `force`)."""
        now, every_ms = now_ms(), self.speed.flush_every_s * 1000
        with self.lock:
            due = [tp for tp, o in self.owned.items() if o.pending() and (force or now - o.flushed_ms >= every_ms)]
            for tp in due:
                if tp in self.owned:  # a refusal re-positions, which may change the owned set
                    self._checkpoint(tp)

    def _checkpoint(self, tp: TopicPartition, reposition: bool = True) -> None:
        """One partition's checkpoint (with the engagements partition of its number: `pair_of`): prepare,
        submit, settle. Refused as stale (another owner moved on): their memory is dropped and, with
        `reposition`, they are loaded again from Redis."""
        main, pair = self.pair_of(tp)
        owned, paired = self.owned[main], self.owned.get(pair) if pair is not None else None
        payload = self.checkpointer.prepare(owned, now_ms(), paired)
        if payload is None:
            return
        both = [main, *([pair] if pair is not None else [])]
        started = time.perf_counter()
        try:
            self.store.submit(payload)
        except StaleBatch as exc:
            metrics.REFUSED.inc()
            event(log, "stale_checkpoint_refused", level=logging.WARNING, partition=f"{tp.topic}:{tp.partition}",
                  start=payload.start, reason=str(exc))
            for one in both:
                self.owned.pop(one, None)
            assigned = [one for one in both if one in self.consumer.assignment()]
            if reposition and assigned:
                self.position(assigned)
            return
        except Exception:  # unknown outcome, data lost, or a bug: prepare() already cleared what it took, so
            # memory no longer matches Redis; the next owner (or load) starts from it
            for one in both:
                self.owned.pop(one, None)
            raise
        metrics.FLUSH.observe(time.perf_counter() - started)
        self.checkpointer.settle(owned, payload, now_ms(), paired)

    def _housekeeping(self) -> None:
        """The Lua worker's housekeeping, then the partitions whose flush interval passed while idle."""
        super()._housekeeping()
        try:
            self._flush_due()
        except DataLost:
            self.rebuild()
        except ServiceError as exc:
            event(log, "service_error", level=logging.ERROR, error=str(exc))
            self._recover()

    def close(self) -> None:
        """Checkpoint every owned partition, flush the dead-letter producer, leave the group."""
        try:
            try:
                self._flush_due(force=True)
            except TrendsError as exc:  # the next owner replays from what Redis holds
                event(log, "service_error", level=logging.ERROR, error=str(exc))
            self.applier.shutdown(wait=True)
            self.dlq.flush()
        finally:
            self.consumer.close(autocommit=False)
            self.lookup.close()
            event(log, "stopped", worker=self.name)
