"""Pipeline job: a pipeline's operator DAG on batches, split at its first stateful operator.

Job partition ``p`` reads partition ``p`` of:
- each input dataset's topic: the stateless prefix of the DAG runs, and its rows go to the
  job's repartition topic keyed by the stateful operator's keys (no repartition topic: the
  pipeline is stateless and the whole DAG runs here). Rows whose keys belong to partition
  ``p`` itself (every row, when the job has one partition) go on to the rest of the DAG in
  the same iteration instead: the same rows, typed the same, one hop fewer;
- the repartition topic: the rest of the DAG runs from the cut, with its state in the hangar,
  and the output rows go to the dataset's topic, keyed by the dataset's keys;
- every partition of each joined (right-hand) dataset's topic: its rows are indexed into
  this job's hangar, so a join reads them locally on any key (a broadcast join: right-hand
  datasets are dimension tables, small next to the streams joined with them).

Where the DAG is cut, the keys of the repartition and the schema crossing it are decided by
the compiler (``commit.stages``) and arrive in the typed job spec; shapes that cannot be cut
were refused at commit.
"""

from __future__ import annotations

import pandas as pd

from fennel_dagster.engine.jobs.common import decode_rows, encode_rows, partitions_of
from fennel_dagster.engine.messages import ErrorRecord, InMessage, Iteration, newest
from fennel_dagster.ops import batches, index
from fennel_dagster.ops.pipeline import BatchResult, PipelineExecutor
from fennel_dagster.ops.rows import dumps
from fennel_dagster.ops.state import OverlayReader, StateReader, WriteBatch
from fennel_dagster.wire import plan, spec


class PipelineJob:
    """``own_share``: run stage 2 at once for the rows of this partition (the runner); False
    sends every stage-1 row to the repartition topic (a backfill's stage 1, whose rows are
    regrouped by partition before stage 2 runs on them)."""

    def __init__(self, job: plan.PipelineJobSpec, own_share: bool = True) -> None:
        self.own_share = own_share
        self.name = job.name
        self.partitions = job.partitions
        self.pipeline = job.pipeline
        self.dataset = job.dataset
        self.output_topic = job.output_topic
        self.inputs = {s.topic: s.dataset for s in job.inputs}
        self.lookups = {s.topic: s.dataset for s in job.lookups}
        datasets = {s.dataset.name: s.dataset for s in (*job.inputs, *job.lookups)}
        datasets[self.dataset.name] = self.dataset
        self.executor = PipelineExecutor(self.pipeline, datasets)
        self.stateful = job.stateful or bool(self.lookups)
        self.repartition = job.repartition

    def input_partitions(self, partition: int) -> list[tuple[str, int]]:
        topics = [*self.inputs]
        if self.repartition is not None:
            topics.append(self.repartition.topic)
        mine = [(t, partition) for t in topics]
        return mine + [(t, q) for t in self.lookups for q in range(self.partitions)]

    def process(self, messages: list[InMessage], state: StateReader) -> Iteration:
        if not messages:
            return Iteration(writes=WriteBatch())
        topic = messages[0].topic
        if topic in self.lookups:
            return self._index_right(self.lookups[topic], messages)
        rp = self.repartition
        if rp is not None and topic == rp.topic:
            rows, _, errors = decode_rows(messages, rp.schema, self.dataset.name)
            result = self.executor.run(None, rows, state, start_at=rp.cut)
            return self._emit(result, messages[0], errors)
        ds = self.inputs[topic]
        rows, _, errors = decode_rows(messages, ds.fields, ds.name)
        if rp is None:
            return self._emit(self.executor.run(ds.name, rows, state), messages[0], errors)
        result = self.executor.run(ds.name, rows, state, stop_at=rp.cut)
        it = Iteration(errors=errors + _row_errors(result, messages[0]), writes=result.writes)
        it.late = result.late
        away = (
            self._run_own_share(result, messages[0], state, it) if self.own_share else result.rows
        )
        out, bad = encode_rows(
            self.dataset, away, rp.topic, self.partitions, messages[0],
            f"{self.executor.scope} (repartition)", key_fields=rp.keys, fields=rp.schema,
        )  # fmt: skip
        it.outputs += out
        it.errors += bad
        return it

    def _run_own_share(
        self, first: BatchResult, source: InMessage, state: StateReader, it: Iteration
    ) -> pd.DataFrame:
        """Stage 2 at once for the rows the repartition would send back to this partition
        (all of them with one partition): a hop that only re-encodes is skipped. The rows are
        typed by the cut's schema, as the topic would type them, and stage 2's outputs,
        writes and errors join ``it``; the rows for other partitions are returned."""
        rp = self.repartition
        assert rp is not None
        rows = first.rows
        if rows.empty:
            return rows
        own = source.partition % self.partitions
        parts = partitions_of(rows, rp.keys, self.partitions, own)
        here = parts == own
        if not here.any():
            return rows
        mine = rows if here.all() else rows[here]
        typed, _ = batches.frame_of(batches.to_table(mine, rp.schema), rp.schema)
        reader = OverlayReader(state, first.writes) if len(first.writes) else state
        second = self.executor.run(None, typed, reader, start_at=rp.cut)
        done = self._emit(second, source, [])
        assert isinstance(it.writes, WriteBatch)
        it.writes.update(second.writes)
        it.outputs += done.outputs
        it.errors += done.errors
        it.late += done.late
        it.newest_event_us = newest(it.newest_event_us, done.newest_event_us)
        return rows.iloc[0:0] if here.all() else rows[~here].reset_index(drop=True)

    def _emit(self, result: BatchResult, first: InMessage, errors: list[ErrorRecord]) -> Iteration:
        it = Iteration(errors=errors + _row_errors(result, first), writes=result.writes)
        it.late = result.late
        rows: pd.DataFrame = result.rows
        out, bad = encode_rows(
            self.dataset, rows, self.output_topic, self.partitions, first, self.executor.scope
        )
        it.outputs += out
        it.errors += bad
        if out:
            it.newest_event_us = newest_event_us(rows, self.dataset.timestamp)
        return it

    def _index_right(self, ds: spec.DatasetSpec, messages: list[InMessage]) -> Iteration:
        rows, deleted, errors = decode_rows(messages, ds.fields, ds.name)
        wb = WriteBatch()
        if not rows.empty:
            index.upsert(ds, rows, wb, deleted)
        return Iteration(errors=errors, writes=wb)


def _row_errors(result: BatchResult, first: InMessage) -> list[ErrorRecord]:
    return [
        ErrorRecord(e.dataset, "user-code", e.reason, first.topic, first.partition,
                    first.offset, dumps(e.row), e.operator, e.row)
        for e in result.errors
    ]  # fmt: skip


def newest_event_us(rows: pd.DataFrame, ts: str) -> int | None:
    """The newest event time of the rows written (µs since the epoch), for freshness."""
    if ts not in rows.columns or rows.empty:
        return None
    col = rows[ts]
    if not isinstance(col.dtype, pd.DatetimeTZDtype):  # typed rows are; convert only others
        col = pd.to_datetime(col, utc=True, errors="coerce")
    newest = col.max()
    return None if pd.isna(newest) else int(newest.value // 1000)
