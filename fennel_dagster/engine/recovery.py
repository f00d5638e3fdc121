"""Recovery of one job partition's state: local hangar, else newest snapshot, then replay.

The replaylog holds a marker per committed batch naming its input ranges. Markers the state
does not reflect yet are replayed from the input topics into state only (their outputs were
committed already), until the state's offsets equal the consumer group's committed offsets.

Every wait here ends with the runner's ``stop`` flag (``StopRequested``), and a topic that is
gone (its job deleted under a runner that was starting) is said at once (``TopicGone``)
instead of being polled for minutes: a supervisor tearing down a deleted branch must not wait
on runners that cannot finish recovering.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from fennel_dagster.engine import kafka_clients
from fennel_dagster.engine.failures import RecoveryError, StopRequested, TopicGone
from fennel_dagster.engine.faults import maybe_crash
from fennel_dagster.engine.hangar import Hangar
from fennel_dagster.engine.messages import InMessage, Iteration
from fennel_dagster.engine.rocks_tuning import RocksTuning
from fennel_dagster.engine.snapshots import SnapshotStore
from fennel_dagster.ops.state import OverlayReader, WriteBatch
from fennel_dagster.settings import Settings

TP = tuple[str, int]
# how often a wait that sees no messages asks whether its topic still exists
TOPIC_CHECK_S = 5.0
Process = Callable[[list[InMessage], OverlayReader], Iteration]


@dataclass
class Replayed:
    batches: int = 0
    messages: int = 0


def open_state(
    store: SnapshotStore, path: Path, job: str, partition: int, tuning: RocksTuning | None = None
) -> tuple[Hangar, str | None]:
    """The partition's hangar: the local one if it finished opening before for this
    incarnation of the job, else restored from the newest snapshot (or empty). Returns the
    snapshot key it restored, if any.

    The incarnation is the one the bank gave the job's snapshot prefix: a job deleted and
    committed again under the same name gets a new one, so its runners never read state
    left by the deleted one."""
    for stale in path.parent.glob(f".{path.name}.ckpt-*"):
        shutil.rmtree(stale, ignore_errors=True)  # a snapshot a crash interrupted
    ready = path / ".ready"
    incarnation = store.incarnation(job)
    restored = None
    if not ready.exists() or ready.read_text() != incarnation:
        if path.exists():
            shutil.rmtree(path)
        restored = store.restore_latest(job, partition, path)
        path.mkdir(parents=True, exist_ok=True)
        ready.write_text(incarnation)
    return Hangar(path, tuning=tuning), restored


class Recovery:
    """Brings a hangar up to the committed offsets of its job partition."""

    def __init__(
        self,
        settings: Settings,
        job: str,
        partition: int,
        replaylog: str | None,
        process: Process,
        stop: threading.Event | None = None,
    ) -> None:
        self.settings = settings
        self.job = job
        self.partition = partition
        self.replaylog = replaylog
        self.process = process
        self.replayed = Replayed()
        self.stop = stop or threading.Event()

    def _check_stop(self) -> None:
        if self.stop.is_set():
            raise StopRequested(f"job {self.job} p{self.partition}: stopped during recovery")

    def run(self, hangar: Hangar, consumer: Consumer, tps: list[TP]) -> list[TopicPartition]:
        """Replay committed-but-unapplied batches into state; return where to consume from.

        Markers are read under read_committed, which stops at the replaylog's last stable
        offset: another partition's open transaction can hide our newest markers for a
        moment, so we read again until the state reaches the group's committed offsets.
        """
        deadline = time.monotonic() + 120
        while True:
            self._check_stop()
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
                    f"job {self.job} p{self.partition}: state is behind the committed "
                    f"offsets {behind} and the replaylog has no markers for the gap"
                )
            self.stop.wait(0.2)
        starts = []
        for t, p in tps:
            start = mine.get((t, p), committed.get((t, p), -1))
            starts.append(TopicPartition(t, p, start if start >= 0 else OFFSET_BEGINNING))
        return starts

    def _replay(self, hangar: Hangar) -> None:
        applied = hangar.offsets()
        hint = hangar.marker()
        markers = self._read_markers(-1 if hint is None else hint + 1)
        reader_c = kafka_clients.consumer(self.settings, f"{self.job}.replay")
        try:
            for offset, marker in markers:
                if "ranges" not in marker:
                    continue  # a backfill's seed marker: its state came in a snapshot
                ranges = [(t, int(p), int(a), int(b)) for t, p, a, b in marker["ranges"]]
                if all(applied.get((t, p), -1) > b for t, p, _, b in ranges):
                    continue
                pending = WriteBatch()
                reader = OverlayReader(hangar, pending)
                for t, p, a, b in ranges:
                    self._check_stop()
                    msgs = self._read_range(reader_c, t, p, a, b)
                    it = self.process(msgs, reader)
                    if it.writes is not None:
                        pending.update(it.writes)
                    self.replayed.messages += len(msgs)
                maybe_crash("mid_replay")
                new = {(t, p): b + 1 for t, p, _, b in ranges}
                hangar.apply(pending, new, offset)
                applied.update(new)
                self.replayed.batches += 1
        finally:
            reader_c.close()

    def _read_markers(self, start: int) -> list[tuple[int, dict[str, Any]]]:
        assert self.replaylog is not None
        return read_markers(self.settings, self.job, self.replaylog, self.partition, start,
                            self.stop)  # fmt: skip

    def _read_range(
        self, c: Consumer, topic: str, part: int, first: int, last: int
    ) -> list[InMessage]:
        c.assign([TopicPartition(topic, part, first)])
        out: list[InMessage] = []
        deadline = time.monotonic() + 120
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            self._check_stop()
            msgs = c.consume(1000, 1.0)
            if msgs:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > TOPIC_CHECK_S:
                quiet_since = time.monotonic()
                if kafka_clients.topic_missing(c, topic):
                    raise TopicGone(f"job {self.job} p{self.partition}: input topic {topic!r} "
                                    "is gone; it cannot be replayed")  # fmt: skip
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(err)
                offset = msg.offset() or 0
                if offset > last:
                    return out
                out.append(kafka_clients.in_message(msg))
                if offset == last:
                    return out
        raise RecoveryError(
            f"job {self.job} p{self.partition}: replay of {topic}[{part}] "
            f"{first}..{last} did not finish; were the input's messages deleted by retention?"
        )


def read_markers(
    settings: Settings,
    job: str,
    replaylog: str,
    partition: int,
    start: int = -1,
    stop: threading.Event | None = None,
) -> list[tuple[int, dict[str, Any]]]:
    """(offset, marker) of every committed marker of ``partition`` in ``replaylog`` from
    offset ``start`` (-1: the beginning): batch markers and a backfill's seed markers.
    ``StopRequested`` once ``stop`` is set; ``TopicGone`` if the replaylog does not exist."""
    c = kafka_clients.consumer(settings, f"{job}.replay", **{"enable.partition.eof": True})
    out: list[tuple[int, dict[str, Any]]] = []

    def gone() -> TopicGone:
        return TopicGone(f"job {job}: its replaylog {replaylog!r} is gone")

    try:
        if kafka_clients.topic_missing(c, replaylog):
            raise gone()
        c.assign([TopicPartition(replaylog, 0, start if start >= 0 else OFFSET_BEGINNING)])
        deadline = time.monotonic() + 120
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            if stop is not None and stop.is_set():
                raise StopRequested(f"job {job}: stopped while reading replaylog {replaylog}")
            msg = c.poll(1.0)
            if msg is None:
                if time.monotonic() - quiet_since > TOPIC_CHECK_S:
                    quiet_since = time.monotonic()
                    if kafka_clients.topic_missing(c, replaylog):
                        raise gone()
                continue
            quiet_since = time.monotonic()
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return out
                raise KafkaException(err)
            marker = json.loads(msg.value() or b"{}")
            if marker.get("p") == partition:
                out.append((msg.offset() or 0, marker))
        raise RecoveryError(f"job {job}: reading replaylog {replaylog} timed out")
    finally:
        c.close()
