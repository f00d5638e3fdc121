"""Backfill on commit: a new pipeline job computed on Spark from history, then handed over.

A commit that creates a pipeline job (a new derived dataset, or a version bump) whose inputs
already have offline tables runs this after its assets exist and before its commit point, so
the old version keeps serving until the new one is complete:

1. **Pin** each input's offline table: its current Delta version and, per topic partition,
   the first offset not in it (``OfflineTable.pin``). That is the hand-over point.
2. **Read** those versions on Spark, as messages of the topics the job reads: a keyed job
   partition gets its input partition's rows; a job cut around a repartition runs stage 1
   (stateless) on Spark tasks and routes each row to the partition the engine would.
3. **Seed** each job partition on a Spark task, in event-time order, with the engine's own
   job logic (``engine.seeding``): outputs to the dataset's topic (so its index, offline
   table and downstream jobs see history), state and hand-over offsets as the partition's
   first snapshot. Runners started at the commit point consume from the hand-over offsets.

A job whose input has no offline table (``offline=False``, or created by the same commit) is
left to the stream engine, which reads its inputs' topics from the start (they keep
``history`` too): slower, equally correct. ``commit(backfill=False)`` refuses a commit that
creates any pipeline job, as Fennel's does (``commit.protocol.refuse_backfill``).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from fennel_dagster.batch.pipeline import whole_instants
from fennel_dagster.batch.progress import watch
from fennel_dagster.engine.error_records import encode_error
from fennel_dagster.engine.isolation import poison_record, process_isolating
from fennel_dagster.engine.jobs.pipeline import PipelineJob
from fennel_dagster.engine.messages import ErrorRecord, InMessage
from fennel_dagster.engine.partitioning import partition_of_record
from fennel_dagster.engine.seeding import STAGE1_ERRORS, HandOver, SeedResult, seed_partition
from fennel_dagster.offline.table import OFFSET, PARTITION, OfflineTable, TablePin
from fennel_dagster.ops.batches import rows_of
from fennel_dagster.ops.expr import astype
from fennel_dagster.ops.index import DELETED
from fennel_dagster.ops.rows import dumps, to_records
from fennel_dagster.ops.state import MemoryState
from fennel_dagster.settings import Settings
from fennel_dagster.wire import plan, spec

EP, TS, TOPIC, VALUE = "__ep", "__ts", "__topic", "__value"


@dataclass(frozen=True)
class BackfillReport:
    job: str
    dataset: str
    pipeline: str
    how: str  # "spark": seeded from history; "stream": left to the engine; "none": no history
    reason: str
    partitions: tuple[SeedResult, ...] = ()
    seconds: float = 0.0

    @property
    def scope(self) -> str:
        return f"{self.dataset}.{self.pipeline}"

    @property
    def messages(self) -> int:
        return sum(p.messages for p in self.partitions)

    @property
    def outputs(self) -> int:
        return sum(p.outputs for p in self.partitions)


class Backfiller:
    """Seeds the pipeline jobs a commit creates; ``on_progress`` receives readable lines."""

    def __init__(
        self,
        settings: Settings,
        spark: Callable[[], Any],
        on_progress: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.settings = settings
        self.spark = spark
        self.on_progress = on_progress

    def run(
        self, created: Sequence[plan.JobSpec], existing: Sequence[plan.JobSpec], seed_id: str
    ) -> list[BackfillReport]:
        tables = {j.dataset.name: j.table for j in existing if isinstance(j, plan.OfflineJobSpec)}
        new = {j.dataset.name for j in created}
        reports = []
        for job in created:
            if isinstance(job, plan.PipelineJobSpec):
                fresh = [s.dataset.name for s in (*job.inputs, *job.lookups)
                         if s.dataset.name not in tables and s.dataset.name in new]  # fmt: skip
                if fresh:  # a dataset committed with its inputs: they have no history yet
                    continue
                report = self.seed(job, tables, seed_id)
                self.on_progress(_describe(report))
                reports.append(report)
        return reports

    def seed(
        self, job: plan.PipelineJobSpec, tables: dict[str, plan.OfflineTable], seed_id: str
    ) -> BackfillReport:
        ids = (job.name, job.dataset.name, job.pipeline.name)
        name = f"{job.dataset.name}.{job.pipeline.name}"
        streams = (*job.inputs, *job.lookups)
        missing = [s.dataset.name for s in streams if s.dataset.name not in tables]
        if missing:
            return BackfillReport(*ids, "stream", f"input {', '.join(missing)} has "
                                  "no committed offline table: the engine reads its topic")  # fmt: skip
        pins = {s.topic: OfflineTable(self.settings, tables[s.dataset.name]).pin(s.topic, job.partitions)
                for s in streams}  # fmt: skip
        if not any(p.version is not None and any(p.next_offsets.values()) for p in pins.values()):
            return BackfillReport(*ids, "none", "its inputs have no history yet")
        t0 = time.monotonic()
        lines = ", ".join(f"{s.dataset.name} v{pins[s.topic].version}" for s in streams)
        self.on_progress(f"backfill {name} on Spark from {lines}")
        spark = self.spark()
        results = self._run_on_spark(spark, job, tables, pins, seed_id, t0)
        seen = {r.partition for r in results}
        empty = [p for p in range(job.partitions) if p not in seen]
        right = _right_batches(self.settings, job, tables, pins) if empty else []
        for p in empty:  # partitions with no history still get their offsets
            results.append(seed_partition(self.settings, job, p, seed_id,
                                          _hand_over(job, pins, p), right, []))  # fmt: skip
        results.sort(key=lambda r: r.partition)
        return BackfillReport(*ids, "spark", "seeded from history",
                              tuple(results), time.monotonic() - t0)  # fmt: skip

    def _run_on_spark(
        self, spark: Any, job: plan.PipelineJobSpec, tables: dict[str, plan.OfflineTable],
        pins: dict[str, TablePin], seed_id: str, t0: float,
    ) -> list[SeedResult]:  # fmt: skip
        from pyspark.sql import types as T  # noqa: N812 - the PySpark convention

        settings, partitions = self.settings, job.partitions
        frames = []
        for s in job.inputs:
            pin = pins[s.topic]
            if pin.version is None:
                continue
            table = OfflineTable(self.settings, tables[s.dataset.name])
            df = (
                spark.read.format("delta").option("versionAsOf", pin.version).load(table.spark_path)
            )
            keep = (
                [f.name for f in s.dataset.fields]
                + [PARTITION]
                + ([DELETED] if s.dataset.keys else [])
            )
            ds, topic = s.dataset, s.topic
            frames.append(df.select(*keep).mapInPandas(
                lambda it, ds=ds, topic=topic: _as_messages(it, ds, topic, partitions),
                _schema()))  # fmt: skip
        history = frames[0]
        for other in frames[1:]:
            history = history.unionByName(other)
        if job.repartition is not None:
            history = history.mapInPandas(lambda it: _stage1(it, job), _schema())
        ordered = history.repartition(partitions, EP).sortWithinPartitions(EP, TS, VALUE)
        summary = T.StructType([T.StructField(n, t) for n, t in (
            ("partition", T.IntegerType()), ("messages", T.LongType()), ("outputs", T.LongType()),
            ("errors", T.LongType()), ("chunks_sent", T.IntegerType()),
            ("chunks_skipped", T.IntegerType()), ("snapshot", T.StringType()),
            ("seconds", T.DoubleType()))])  # fmt: skip

        def seed(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
            right = _right_batches(settings, job, tables, pins)
            for ep, pieces in itertools.groupby(_by_partition(batches), key=lambda x: x[0]):
                msgs = (batch for _, batch in pieces)
                r = seed_partition(
                    settings, job, ep, seed_id, _hand_over(job, pins, ep), right, msgs
                )
                yield pd.DataFrame([r.__dict__])

        watcher = watch(spark, lambda p: self.on_progress(f"  {p.bar()}"), t0)
        try:
            rows = ordered.mapInPandas(seed, summary).collect()
        finally:
            watcher.set()
        return [SeedResult(**r.asDict()) for r in rows]


def _hand_over(job: plan.PipelineJobSpec, pins: dict[str, TablePin], partition: int) -> HandOver:
    """Partition ``partition``'s inputs at the pins: its own partition of each streamed
    input, every partition of each joined (broadcast) input."""
    offsets = {(s.topic, partition): pins[s.topic].next_offsets[partition] for s in job.inputs}
    for s in job.lookups:
        offsets.update({(s.topic, q): o for q, o in pins[s.topic].next_offsets.items()})
    return HandOver(offsets)


def _schema() -> Any:
    from pyspark.sql import types as T  # noqa: N812

    return T.StructType([
        T.StructField(EP, T.IntegerType()), T.StructField(TS, T.TimestampType()),
        T.StructField(TOPIC, T.StringType()), T.StructField(VALUE, T.BinaryType()),
    ])  # fmt: skip


def _records(rows: pd.DataFrame, ds: spec.DatasetSpec) -> list[dict[str, Any]]:
    """Table rows as the JSON rows of the dataset's topic (tombstones flagged)."""
    typed = pd.DataFrame({f.name: astype(rows[f.name], f.dtype) for f in ds.fields})
    records = to_records(typed, [f.name for f in ds.fields])
    if DELETED in rows.columns:
        for rec, gone in zip(records, rows[DELETED].fillna(False).astype(bool), strict=True):
            if gone:
                rec[DELETED] = True
    return records


def _as_messages(
    batches: Iterator[pd.DataFrame], ds: spec.DatasetSpec, topic: str, partitions: int
) -> Iterator[pd.DataFrame]:
    for pdf in batches:
        records = _records(pdf, ds)
        values = [dumps(r) for r in records]
        parts = []
        for rec, raw, was in zip(records, values, pdf[PARTITION], strict=True):
            # a replayed range has no topic partition: the topic's own rule places it
            parts.append(int(was) if pd.notna(was) else
                         partition_of_record(rec, list(ds.keys), partitions, raw)[1])  # fmt: skip
        yield pd.DataFrame({EP: parts, TS: pd.to_datetime(pdf[ds.timestamp], utc=True),
                            TOPIC: topic, VALUE: values})  # fmt: skip


def _stage1(batches: Iterator[pd.DataFrame], job: plan.PipelineJobSpec) -> Iterator[pd.DataFrame]:
    """The job's stateless first stage, as the engine runs it: rows to the partition of the
    repartition topic they would be sent to (its errors go along, to partition 0)."""
    assert job.repartition is not None
    logic = PipelineJob(job, own_share=False)  # every row to its partition, stage 2 later
    ts = next(f.name for f in job.repartition.schema if f.timestamp)

    def poison(m: InMessage, e: Exception) -> ErrorRecord:
        return poison_record(job.name, job.dataset.name, m, e)

    for pdf in batches:
        eps: list[int] = []
        stamps: list[Any] = []
        topics: list[str] = []
        values: list[bytes] = []
        for batch in _messages(pdf):
            it = process_isolating(logic.process, batch, MemoryState(), poison, job.name)
            for rec in it.outputs:  # one row a value: the history is sorted by time
                for row in rows_of(rec.value, job.repartition.schema):
                    eps.append(rec.partition)
                    stamps.append(pd.Timestamp(row[ts]))
                    topics.append(rec.topic)
                    values.append(dumps(row))
            for err in it.errors:
                eps.append(0)
                stamps.append(pd.NaT)
                topics.append(STAGE1_ERRORS)
                values.append(encode_error(err))
        yield pd.DataFrame({EP: pd.Series(eps, dtype="int32"),
                            TS: pd.to_datetime(pd.Series(stamps, dtype=object), utc=True),
                            TOPIC: topics, VALUE: values})  # fmt: skip


def _messages(pdf: pd.DataFrame) -> Iterator[list[InMessage]]:
    """One list per topic (in order of first appearance), as the engine's batches are."""
    for topic in dict.fromkeys(pdf[TOPIC]):
        part = pdf[pdf[TOPIC] == topic]
        yield [InMessage(topic, int(ep), -1, None, bytes(v))
               for ep, v in zip(part[EP], part[VALUE], strict=True)]  # fmt: skip


def _by_partition(batches: Iterator[pd.DataFrame]) -> Iterator[tuple[int, list[InMessage]]]:
    """(job partition, one topic's messages), in (partition, event time) order, one instant
    never split across two batches."""

    def runs() -> Iterator[tuple[int, pd.DataFrame]]:
        for pdf in batches:
            for ep, part in pdf.groupby(EP, sort=False):
                yield int(ep), part  # type: ignore[call-overload]

    for ep, parts in itertools.groupby(runs(), key=lambda x: x[0]):
        for pdf in whole_instants((p for _, p in parts), TS):
            for msgs in _messages(pdf):
                yield ep, msgs


def _right_batches(
    settings: Settings, job: plan.PipelineJobSpec, tables: dict[str, plan.OfflineTable],
    pins: dict[str, TablePin],
) -> list[list[InMessage]]:  # fmt: skip
    """Every joined dataset's rows at its pin, as its topic's messages (dimension tables are
    small: each job partition indexes all of them, as the engine's broadcast join does)."""
    out = []
    for s in job.lookups:
        pin = pins[s.topic]
        if pin.version is None:
            continue
        table = OfflineTable(settings, tables[s.dataset.name]).read(version=pin.version)
        rows = table.to_pandas().sort_values([PARTITION, OFFSET], kind="stable")
        values = [dumps(rec) for rec in _records(rows, s.dataset)]
        out.append([InMessage(s.topic, int(q) if pd.notna(q) else 0, -1, None, v)
                    for q, v in zip(rows[PARTITION], values, strict=True)])  # fmt: skip
    return out


def _describe(r: BackfillReport) -> str:
    if r.how != "spark":
        return f"backfill {r.scope}: {r.reason}"
    return (f"backfill {r.scope}: {r.messages} history rows -> {r.outputs} rows in "
            f"{len(r.partitions)} partitions on Spark in {r.seconds:.1f}s; the stream "
            "takes over at the pinned offsets")  # fmt: skip


__all__ = ["BackfillReport", "Backfiller"]
