"""Runner: one job partition, exactly once (seed 003's "Job Runner").

Each iteration: read a batch from the job's input partitions, run the job on it, then in
ONE Kafka transaction produce the outputs, the error records, a marker in the job's
replaylog (which input ranges this batch was, in order) and the consumed offsets; after the
commit, apply the state mutations to RocksDB together with those offsets (one atomic write).

Recovery: ``init_transactions`` fences any older runner of this partition (same
``transactional.id``) and aborts its open transaction. Then the state comes from the local
hangar, or — if it is missing — from the newest S3 snapshot, or empty. The replaylog holds a
marker for every committed batch; markers the state does not reflect yet are replayed from
the input topics into state only (their outputs were committed already). Then the state's
offsets equal the group's committed offsets, and the runner consumes from there.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from tenacity import Retrying, retry_if_not_exception_type, stop_when_event_set, wait_exponential

from fennel_dagster.engine.errors import encode_error
from fennel_dagster.engine.faults import maybe_crash
from fennel_dagster.engine.hangar import Hangar
from fennel_dagster.engine.jobs.base import JobLogic
from fennel_dagster.engine.jobs.factory import build_job
from fennel_dagster.engine.messages import InMessage, Iteration
from fennel_dagster.engine.snapshots import SnapshotStore
from fennel_dagster.errors import EngineError
from fennel_dagster.metadata import registry
from fennel_dagster.metadata.db import connect
from fennel_dagster.metadata.registry import JobRow
from fennel_dagster.ops.state import OverlayReader, WriteBatch
from fennel_dagster.settings import Settings

log = logging.getLogger("fennel_dagster.engine.runner")

TP = tuple[str, int]


class Fenced(EngineError, RuntimeError):
    """A newer runner took over this partition: stop without touching state."""


class RecoveryError(EngineError, RuntimeError):
    """Recovery could not finish yet (a missing topic, a slow replaylog): retried."""


class PermanentJobError(EngineError):
    """A job partition that cannot run as committed (its spec cannot be built, or its logic
    raised on a batch: ``process`` is deterministic, so a retry would raise again). The
    runner stops and records the reason in the registry instead of retrying forever."""


@dataclass
class RunnerStats:
    batches: int = 0
    messages: int = 0
    outputs: int = 0
    errors: int = 0
    late: int = 0
    replayed_batches: int = 0
    replayed_messages: int = 0
    recovery_s: float = 0.0
    restored_snapshot: str | None = None
    snapshots: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def state_path(settings: Settings, owner: str, job: str, partition: int) -> Path:
    return settings.state_path / owner / job / f"p{partition}"


class Runner:
    def __init__(
        self,
        settings: Settings,
        job: JobRow,
        partition: int,
        owner: str,
        state_dir: Path | None = None,
    ) -> None:
        self.settings = settings
        self.job = job
        self.partition = partition
        self.owner = owner
        self.path = state_dir or state_path(settings, owner, job.name, partition)
        self.snapshots = SnapshotStore(settings)
        self.stats = RunnerStats()
        self.txn_id = f"{job.name}.p{partition}"
        # one consumer group per job partition: a broadcast (join) input is read by every
        # partition of the job, so their committed offsets must not overwrite each other
        self.group = f"{job.name}.p{partition}"
        try:
            self.logic: JobLogic = build_job(job.spec, self._topic_partitions)
        except RecoveryError:
            raise
        except Exception as e:
            raise PermanentJobError(
                f"job {job.name} (of {job.spec.dataset.name}) cannot be built from its "
                f"committed spec: {type(e).__name__}: {e}"
            ) from e
        self.error_topic: str | None = job.spec.error_topic
        self.replaylog: str | None = job.spec.replaylog
        self._marker_offset: int | None = None
        self._upload: threading.Thread | None = None
        self._last_snapshot = time.monotonic()
        self._dirty = False
        self._snapshot_requested = threading.Event()
        self.snapshot_done = threading.Event()
        self.snapshot_on_stop = True  # graceful stops leave a fresh snapshot for the next owner

    # ------------------------------------------------------------------ kafka plumbing

    def _topic_partitions(self, topic: str) -> int:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.settings.kafka_servers})
        deadline = time.monotonic() + 60
        while True:
            md = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
            if md is not None and md.error is None and md.partitions:
                return len(md.partitions)
            if time.monotonic() > deadline:
                raise RecoveryError(
                    f"job {self.job.name}: input topic {topic!r} does not exist; create it "
                    "(or produce to it) and the runner will start"
                )
            time.sleep(1)

    def _consumer(self, group: str, **extra: Any) -> Consumer:
        conf = {
            "bootstrap.servers": self.settings.kafka_servers,
            "group.id": group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 10,
            "fetch.min.bytes": 1,
            **extra,
        }
        return Consumer(conf)

    def _producer(self) -> Producer:
        return Producer(
            {
                "bootstrap.servers": self.settings.kafka_servers,
                "transactional.id": self.txn_id,
                "enable.idempotence": True,
                "linger.ms": 2,
                "transaction.timeout.ms": 60_000,
                "message.max.bytes": 10_000_000,
            }
        )

    # ------------------------------------------------------------------ recovery

    def _open_state(self) -> Hangar:
        for stale in self.path.parent.glob(f".{self.path.name}.ckpt-*"):
            shutil.rmtree(stale, ignore_errors=True)  # a snapshot a crash interrupted
        ready = self.path / ".ready"
        if not ready.exists():
            if self.path.exists():
                shutil.rmtree(self.path)
            key = self.snapshots.restore_latest(self.job.name, self.partition, self.path)
            self.stats.restored_snapshot = key
            self.path.mkdir(parents=True, exist_ok=True)
            ready.touch()
        return Hangar(self.path)

    def _read_markers(self, start: int) -> list[tuple[int, dict[str, Any]]]:
        """Committed markers of this partition in the replaylog from ``start``."""
        assert self.replaylog is not None
        c = self._consumer(f"{self.job.name}.replay", **{"enable.partition.eof": True})
        out: list[tuple[int, dict[str, Any]]] = []
        try:
            c.assign([TopicPartition(self.replaylog, 0, start if start >= 0 else OFFSET_BEGINNING)])
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                msg = c.poll(1.0)
                if msg is None:
                    continue
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        return out
                    raise KafkaException(msg.error())
                marker = json.loads(msg.value())
                if marker.get("p") == self.partition:
                    out.append((msg.offset(), marker))
            raise RecoveryError(
                f"job {self.job.name}: reading replaylog {self.replaylog} timed out"
            )
        finally:
            c.close()

    def _read_range(
        self, c: Consumer, topic: str, part: int, first: int, last: int
    ) -> list[InMessage]:
        c.assign([TopicPartition(topic, part, first)])
        out: list[InMessage] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for msg in c.consume(1000, 1.0):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(msg.error())
                if msg.offset() > last:
                    return out
                out.append(_in(msg))
                if msg.offset() == last:
                    return out
        raise RecoveryError(
            f"job {self.job.name} p{self.partition}: replay of {topic}[{part}] "
            f"{first}..{last} did not finish; were the input's messages deleted by retention?"
        )

    def recover(self, hangar: Hangar, consumer: Consumer) -> list[TopicPartition]:
        """Replay committed-but-unapplied batches into state; return where to consume from.

        Markers are read under read_committed, which stops at the replaylog's last stable
        offset: another partition's open transaction can hide our newest markers for a
        moment, so we read again until the state reaches the group's committed offsets.
        """
        t0 = time.monotonic()
        tps = self.logic.input_partitions(self.partition)
        deadline = time.monotonic() + 120
        while True:
            if self.replaylog is not None:
                self._replay(hangar)
            committed = {
                (tp.topic, tp.partition): tp.offset
                for tp in consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=30)
            }
            mine = hangar.offsets()
            behind = [
                (t, p, mine.get((t, p)), committed[(t, p)])
                for t, p in tps
                if committed.get((t, p), -1) >= 0 and mine.get((t, p), -1) < committed[(t, p)]
            ]
            if not behind or self.replaylog is None:
                break
            if time.monotonic() > deadline:
                raise RecoveryError(
                    f"job {self.job.name} p{self.partition}: state is behind the committed "
                    f"offsets {behind} and the replaylog has no markers for the gap"
                )
            time.sleep(0.2)
        self.stats.recovery_s = time.monotonic() - t0
        starts = []
        for t, p in tps:
            start = mine.get((t, p), committed.get((t, p), -1))
            starts.append(TopicPartition(t, p, start if start >= 0 else OFFSET_BEGINNING))
        return starts

    def _replay(self, hangar: Hangar) -> None:
        applied = hangar.offsets()
        hint = hangar.marker()
        markers = self._read_markers(-1 if hint is None else hint + 1)
        reader_c = self._consumer(f"{self.job.name}.replay")
        try:
            for offset, marker in markers:
                ranges = [(t, int(p), int(a), int(b)) for t, p, a, b in marker["ranges"]]
                if all(applied.get((t, p), -1) > b for t, p, _, b in ranges):
                    continue
                pending = WriteBatch()
                reader = OverlayReader(hangar, pending)
                for t, p, a, b in ranges:
                    msgs = self._read_range(reader_c, t, p, a, b)
                    it = self._process(msgs, reader)
                    if it.writes is not None:
                        pending.puts.update(it.writes.puts)
                    self.stats.replayed_messages += len(msgs)
                maybe_crash("mid_replay")
                new = {(t, p): b + 1 for t, p, _, b in ranges}
                hangar.apply(pending, new, offset)
                applied.update(new)
                self.stats.replayed_batches += 1
        finally:
            reader_c.close()

    # ------------------------------------------------------------------ the loop

    def run(
        self, stop: threading.Event | None = None, heartbeat: Callable[[], None] | None = None
    ) -> RunnerStats:
        stop = stop or threading.Event()
        producer = self._producer()
        try:
            producer.init_transactions(60)  # fences any older runner of this partition
        except KafkaException as e:
            raise Fenced(f"{self.txn_id}: init_transactions failed: {e}") from e
        hangar = self._open_state()
        consumer = self._consumer(self.group)
        try:
            consumer.assign(self.recover(hangar, consumer))
            log.info("runner %s p%d started (recovery %.2fs, replayed %d batches)",
                     self.job.name, self.partition, self.stats.recovery_s, self.stats.replayed_batches)  # fmt: skip
            last_beat = 0.0
            timeout = self.settings.engine_txn_interval_ms / 1000
            while not stop.is_set():
                now = time.monotonic()
                if heartbeat is not None and now - last_beat > 2.0:
                    heartbeat()
                    last_beat = now
                msgs = consumer.consume(self.settings.engine_batch_size, timeout)
                batch = [m for m in msgs if not m.error()]
                for m in msgs:
                    if m.error() and m.error().code() != KafkaError._PARTITION_EOF:
                        log.warning("%s: consume error %s", self.txn_id, m.error())
                if batch:
                    self._iterate(producer, consumer, hangar, batch)
                if self._snapshot_requested.is_set():
                    self._snapshot_requested.clear()
                    self.snapshot_now(hangar)
                else:
                    self._maybe_snapshot(hangar)
            self._join_upload()
            if self.snapshot_on_stop:
                self.snapshot_now(hangar)
        finally:
            consumer.close()
            hangar.close()
        return self.stats

    def _iterate(
        self, producer: Producer, consumer: Consumer, hangar: Hangar, msgs: list[Any]
    ) -> None:
        groups: dict[TP, list[InMessage]] = {}
        for m in msgs:
            groups.setdefault((m.topic(), m.partition()), []).append(_in(m))
        pending = WriteBatch()
        reader = OverlayReader(hangar, pending)
        ranges: list[list[Any]] = []
        try:
            producer.begin_transaction()
            for (topic, part), group in groups.items():
                it = self._process(group, reader)
                if it.writes is not None:
                    pending.puts.update(it.writes.puts)
                for rec in it.outputs:
                    producer.produce(rec.topic, rec.value, rec.key, partition=rec.partition)
                    self.stats.outputs += 1
                if it.errors and self.error_topic:
                    for err in it.errors:
                        producer.produce(self.error_topic, encode_error(err), partition=0)
                    self.stats.errors += len(it.errors)
                self.stats.late += it.late
                ranges.append([topic, part, group[0].offset, group[-1].offset])
                producer.poll(0)
            if self.replaylog is not None:
                marker = {"p": self.partition, "ranges": ranges}
                producer.produce(self.replaylog, json.dumps(marker).encode(), partition=0,
                                 on_delivery=self._on_marker)  # fmt: skip
            maybe_crash("mid_batch")
            offsets = [TopicPartition(t, p, b + 1) for t, p, _, b in ranges]
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(60)
        except KafkaException as e:
            cause = e.args[0] if e.args else None
            if isinstance(cause, KafkaError) and (cause.fatal() or cause.code() in _FENCED):
                raise Fenced(f"{self.txn_id}: fenced by a newer runner ({cause})") from e
            if isinstance(cause, KafkaError) and cause.txn_requires_abort():
                producer.abort_transaction(30)
            raise
        maybe_crash("after_commit")
        producer.poll(0)
        hangar.apply(pending, {(t, p): b + 1 for t, p, _, b in ranges}, self._marker_offset)
        self._dirty = True
        self.stats.batches += 1
        self.stats.messages += len(msgs)

    def _process(self, msgs: list[InMessage], reader: OverlayReader) -> Iteration:
        try:
            return self.logic.process(msgs, reader)
        except Exception as e:
            first, last = msgs[0], msgs[-1]
            raise PermanentJobError(
                f"job {self.job.name} (of {self.job.spec.dataset.name}) partition "
                f"{self.partition} failed on {first.topic}[{first.partition}] offsets "
                f"{first.offset}..{last.offset}: {type(e).__name__}: {e}"
            ) from e

    def _on_marker(self, err: Any, msg: Any) -> None:
        if err is None:
            self._marker_offset = msg.offset()

    # ------------------------------------------------------------------ snapshots

    def _maybe_snapshot(self, hangar: Hangar, force: bool = False) -> None:
        due = time.monotonic() - self._last_snapshot >= self.settings.engine_snapshot_interval_s
        if not self._dirty or not (due or force) or (self._upload and self._upload.is_alive()):
            return
        marker = hangar.marker()
        ck = self.path.parent / f".{self.path.name}.ckpt-{os.getpid()}-{self.stats.snapshots}"
        hangar.checkpoint(ck)
        self._last_snapshot = time.monotonic()
        self._dirty = False

        def upload() -> None:
            try:
                self.snapshots.upload(self.job.name, self.partition, marker, ck)
                self.snapshots.prune(
                    self.job.name, self.partition, self.settings.engine_snapshots_kept
                )
                self.stats.snapshots += 1
            except Exception:  # noqa: BLE001 - the next snapshot retries; state is safe locally
                log.exception("%s: snapshot upload failed", self.txn_id)
            finally:
                shutil.rmtree(ck, ignore_errors=True)

        self._upload = threading.Thread(target=upload, name=f"snapshot-{self.txn_id}", daemon=True)
        self._upload.start()

    def snapshot_now(self, hangar: Hangar) -> None:
        self._join_upload()
        self._dirty = True
        self._maybe_snapshot(hangar, force=True)
        self._join_upload()
        self.snapshot_done.set()

    def request_snapshot(self) -> None:
        """Ask the running loop (another thread) for a snapshot now; see ``snapshot_done``."""
        self.snapshot_done.clear()
        self._snapshot_requested.set()

    def _join_upload(self) -> None:
        if self._upload is not None:
            self._upload.join()


_FENCED = {
    getattr(KafkaError, name)
    for name in (
        "_FENCED",
        "_FATAL",  # produce() after a fencing reports only "fatal"
        "PRODUCER_FENCED",
        "INVALID_PRODUCER_EPOCH",
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    )
    if hasattr(KafkaError, name)
}


def _in(msg: Any) -> InMessage:
    ts = msg.timestamp()
    return InMessage(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(),
                     ts[1] if ts else 0)  # fmt: skip


def run_forever(
    settings: Settings, job: JobRow, partition: int, owner: str, stop: threading.Event | None = None
) -> str | None:
    """A runner with its heartbeat in Postgres, until ``stop`` or the job leaves the registry.

    Transient failures (Kafka, Postgres, S3, a missing topic) are retried with exponential
    backoff; the runner recovers from durable state each time. A permanent failure stops the
    partition: its reason is recorded in the registry (``registry.failures``) and returned.
    Returns None after a clean stop or a fencing.
    """
    stop = stop or threading.Event()

    def once() -> None:
        with connect(settings, settings.pg_schema, autocommit=True) as conn:

            def beat() -> None:
                registry.heartbeat_runner(conn, job.hash, partition, owner, os.getpid())
                if not registry.job_exists(conn, job.hash):
                    log.info("%s.p%d: job removed from the registry; stopping", job.name, partition)
                    stop.set()

            beat()
            Runner(settings, job, partition, owner).run(stop, beat)

    retrying = Retrying(
        retry=retry_if_not_exception_type((Fenced, PermanentJobError)),
        wait=wait_exponential(multiplier=0.5, max=10.0),
        stop=stop_when_event_set(stop),
        sleep=lambda seconds: None if stop.wait(seconds) else None,  # wakes on stop
        before_sleep=lambda state: log.warning(
            "%s.p%d: runner failed (%s); restarting in %.1fs",
            job.name,
            partition,
            state.outcome.exception() if state.outcome else None,
            state.next_action.sleep if state.next_action else 0.0,
        ),  # fmt: skip
        reraise=True,
    )
    try:
        retrying(once)
    except Fenced:
        log.warning("%s.p%d: fenced; stopping", job.name, partition)
    except PermanentJobError as e:
        log.error("%s.p%d: stopped for good: %s", job.name, partition, e)
        with connect(settings, settings.pg_schema, autocommit=True) as conn:
            registry.record_failure(conn, job.hash, partition, owner, str(e))
        return str(e)
    return None
