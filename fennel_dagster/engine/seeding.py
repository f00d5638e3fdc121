"""Seeding one job partition from history: the engine's half of a backfill's hand-over.

A Spark task (``engine.backfill``) hands us the history of one job partition as messages in
event-time order — the input rows the partition would have consumed below the hand-over
offsets. We run the job's own logic on them (``PipelineJob.process``, as the runner does),
send its outputs to the dataset's topic in Kafka transactions, and leave the resulting state
as the partition's first snapshot, its offsets set to the hand-over point. The last
transaction also commits those offsets for the partition's consumer group. A runner that
starts later restores the snapshot and consumes from the hand-over offsets: no gap, no
duplicate.

Each transaction carries a seed marker ``{"p", "seed", "chunk"}`` in the job's replaylog.
A retried task (Spark re-runs failed tasks) reads them first and does not send a chunk
twice; recomputing the state is deterministic, so its snapshot is the same.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import (
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)

from fennel_dagster.engine import kafka_clients
from fennel_dagster.engine.error_records import encode_error
from fennel_dagster.engine.failures import RecoveryError
from fennel_dagster.engine.faults import maybe_crash
from fennel_dagster.engine.hangar import Hangar
from fennel_dagster.engine.isolation import poison_record, process_isolating
from fennel_dagster.engine.jobs.pipeline import PipelineJob
from fennel_dagster.engine.messages import ErrorRecord, InMessage, OutRecord
from fennel_dagster.engine.recovery import read_markers
from fennel_dagster.engine.rocks_tuning import RocksTuning
from fennel_dagster.engine.snapshots import SnapshotStore
from fennel_dagster.ops.state import WriteBatch
from fennel_dagster.settings import Settings
from fennel_dagster.wire import plan

CHUNK_OUTPUTS = 20_000  # output rows per Kafka transaction: well inside its timeout
STAGE1_ERRORS = ""  # the "topic" of history messages that are stage 1's error records


@dataclass(frozen=True)
class HandOver:
    """Where a job partition's stream takes over: the next offset of each input it reads."""

    offsets: dict[tuple[str, int], int]


@dataclass
class SeedResult:
    partition: int
    messages: int = 0
    outputs: int = 0
    errors: int = 0
    chunks_sent: int = 0
    chunks_skipped: int = 0
    snapshot: str = ""
    seconds: float = 0.0


@dataclass
class _Chunk:
    outputs: list[OutRecord] = field(default_factory=list)
    errors: list[bytes] = field(default_factory=list)
    rows: int = 0  # dataset rows in ``outputs`` (a batch message holds many)


def seed_partition(
    settings: Settings,
    job: plan.PipelineJobSpec,
    partition: int,
    seed_id: str,
    hand_over: HandOver,
    right: Iterable[list[InMessage]],
    history: Iterable[list[InMessage]],
) -> SeedResult:
    """Run ``job`` partition ``partition`` over ``right`` (joined datasets' rows, indexed
    first) and ``history`` (batches of one topic each, in event-time order), send what it
    emits, and store its state as the partition's snapshot at ``hand_over``."""
    t0 = time.monotonic()
    logic = PipelineJob(job)

    def poison(m: InMessage, e: Exception) -> ErrorRecord:
        return poison_record(job.name, job.dataset.name, m, e)

    result = SeedResult(partition)
    done = _sent_chunks(settings, job.name, job.replaylog, partition, seed_id)
    producer = kafka_clients.transactional_producer(settings, f"{job.name}.seed.p{partition}")
    producer.init_transactions(60)
    group = kafka_clients.consumer(settings, f"{job.name}.p{partition}")
    markers: list[int] = []
    with tempfile.TemporaryDirectory(prefix="fd-seed-") as tmp:
        hangar = Hangar(Path(tmp) / "state", tuning=RocksTuning.of(settings))
        try:
            chunk = _Chunk()
            number = 0
            for batch in _batches(right, history):
                if batch[0].topic == STAGE1_ERRORS:  # error records stage 1 already encoded
                    chunk.errors += [m.value for m in batch if m.value is not None]
                    result.errors += len(batch)
                    continue
                it = process_isolating(logic.process, batch, hangar, poison, f"{job.name} seed")
                if it.writes is not None:
                    hangar.apply(it.writes)
                chunk.outputs += it.outputs
                chunk.rows += sum(r.rows for r in it.outputs)
                chunk.errors += [encode_error(e) for e in it.errors]
                result.messages += len(batch)
                result.outputs += sum(r.rows for r in it.outputs)
                result.errors += len(it.errors)
                if chunk.rows >= CHUNK_OUTPUTS:
                    _send(producer, job, partition, seed_id, number, chunk, done, markers,
                          result, offsets=None, group=None)  # fmt: skip
                    chunk, number = _Chunk(), number + 1
            offsets = [TopicPartition(t, p, o) for (t, p), o in sorted(hand_over.offsets.items())]
            _send(producer, job, partition, seed_id, number, chunk, done, markers, result,
                  offsets=offsets, group=group)  # fmt: skip
            hangar.apply(WriteBatch(), hand_over.offsets, markers[-1] if markers else None)
            maybe_crash("before_seed_snapshot")
            checkpoint = hangar.checkpoint(Path(tmp) / "checkpoint")
            marker = markers[-1] if markers else None
            result.snapshot = (
                SnapshotStore(settings).upload(job.name, partition, marker, checkpoint).key
            )
        finally:
            hangar.close()
            group.close()
    result.seconds = time.monotonic() - t0
    return result


def _batches(
    right: Iterable[list[InMessage]], history: Iterable[list[InMessage]]
) -> Iterator[list[InMessage]]:
    for batches in (right, history):
        yield from (b for b in batches if b)


def _send(
    producer: Producer,
    job: plan.PipelineJobSpec,
    partition: int,
    seed_id: str,
    number: int,
    chunk: _Chunk,
    done: dict[int, int],
    markers: list[int],
    result: SeedResult,
    offsets: list[TopicPartition] | None,
    group: Consumer | None,
) -> None:
    """One chunk in one transaction with its seed marker (and, last, the group's offsets);
    a chunk an earlier attempt of this seed committed is not sent again."""
    if number in done:
        markers.append(done[number])
        result.chunks_skipped += 1
        return
    delivered: list[int] = []

    def on_marker(err: KafkaError | None, msg: Message) -> None:
        if err is None:
            delivered.append(msg.offset() or 0)

    producer.begin_transaction()
    for rec in chunk.outputs:
        producer.produce(rec.topic, rec.value, rec.key, partition=rec.partition)
        producer.poll(0)
    for raw in chunk.errors:
        producer.produce(job.error_topic, raw, partition=0)
    marker = {"p": partition, "seed": seed_id, "chunk": number}
    producer.produce(job.replaylog, json.dumps(marker).encode(), partition=0,
                     on_delivery=on_marker)  # fmt: skip
    if offsets is not None and group is not None:
        producer.send_offsets_to_transaction(offsets, group.consumer_group_metadata(), 30)
    maybe_crash("mid_seed")
    producer.commit_transaction(120)
    producer.poll(0)
    if not delivered:
        raise RecoveryError(f"{job.name} p{partition}: seed marker {number} was not delivered")
    markers.append(delivered[0])
    result.chunks_sent += 1


def _sent_chunks(settings: Settings, job: str, replaylog: str, partition: int,
                 seed_id: str) -> dict[int, int]:  # fmt: skip
    """Chunks of this seed already committed for ``partition``: chunk -> marker offset."""
    return {int(m["chunk"]): offset for offset, m in read_markers(settings, job, replaylog, partition)
            if m.get("seed") == seed_id}  # fmt: skip
