"""Pipeline job: a pipeline's operator DAG on batches, split at its first stateful operator.

Job partition ``p`` reads partition ``p`` of:
- each input dataset's topic: the stateless prefix of the DAG runs, and its rows go to the
  job's repartition topic keyed by the stateful operator's keys (no repartition topic: the
  pipeline is stateless and the whole DAG runs here);
- the repartition topic: the rest of the DAG runs from the cut, with its state in the hangar,
  and the output rows go to the dataset's topic, keyed by the dataset's keys;
- every partition of each joined (right-hand) dataset's topic: its rows are indexed into
  this job's hangar, so a join reads them locally on any key (a broadcast join: right-hand
  datasets are dimension tables, small next to the streams joined with them).

Later stateful operators must group by the same keys as the first (they run in the same
partition); a pipeline that does otherwise is refused when the job is built.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from fennel_dagster.commit.infer import node_schemas
from fennel_dagster.engine.jobs.common import dataset_of, decode_rows, encode_rows
from fennel_dagster.engine.messages import ErrorRecord, InMessage, Iteration
from fennel_dagster.ops import index
from fennel_dagster.ops.pipeline import PipelineError, PipelineExecutor
from fennel_dagster.ops.rows import dumps
from fennel_dagster.ops.state import StateReader, WriteBatch
from fennel_dagster.wire import spec
from fennel_dagster.wire.codec import from_jsonable

# The operators that need rows grouped by key: the compiler repartitions at the first one.
KEYED_NODES = (spec.AggregateNode, spec.FirstNode, spec.LatestNode)


class PipelineJob:
    def __init__(self, name: str, job: dict[str, Any]) -> None:
        self.name = name
        self.partitions = int(job["partitions"])
        self.pipeline: spec.PipelineSpec = from_jsonable(job["pipeline"])
        self.dataset = dataset_of(job["dataset"])
        self.output_topic: str = job["outputs"][0]
        self.inputs: dict[str, spec.DatasetSpec] = {
            topic: dataset_of(job["input_datasets"][ds])
            for ds, topic in job.get("input_topics", {}).items()
        }
        self.lookups: dict[str, spec.DatasetSpec] = {
            topic: dataset_of(job["lookup_datasets"][ds])
            for ds, topic in job.get("lookup_topics", {}).items()
        }
        # a joined dataset is also an @inputs of the pipeline: it is read as a lookup only
        self.inputs = {t: d for t, d in self.inputs.items() if t not in self.lookups}
        datasets = {
            ds: dataset_of(raw)
            for ds, raw in {**job["input_datasets"], **job.get("lookup_datasets", {})}.items()
        }
        datasets[self.dataset.name] = self.dataset
        self.executor = PipelineExecutor(self.pipeline, datasets)
        self.repartition: str | None = job.get("repartition_topic")
        self.partition_by: list[str] = list(job.get("partition_by") or [])
        self.stateful = bool(job.get("state")) or bool(self.lookups)
        self.cut: str | None = None
        self.cut_schema: list[spec.FieldSpec] = []
        if self.repartition is not None:
            self.cut = _cut(self.pipeline)
            self.cut_schema = node_schemas(self.pipeline, datasets)[self.cut]

    def input_partitions(self, partition: int) -> list[tuple[str, int]]:
        topics = [*self.inputs]
        if self.repartition is not None:
            topics.append(self.repartition)
        mine = [(t, partition) for t in topics]
        return mine + [(t, q) for t in self.lookups for q in range(self.partitions)]

    def process(self, messages: list[InMessage], state: StateReader) -> Iteration:
        if not messages:
            return Iteration(writes=WriteBatch())
        topic = messages[0].topic
        if topic in self.lookups:
            return self._index_right(self.lookups[topic], messages)
        if topic == self.repartition:
            rows, _, errors = decode_rows(messages, self.cut_schema, self.dataset.name)
            result = self.executor.run(None, rows, state, start_at=self.cut)
            it = self._emit(result, messages[0], errors)
            return it
        ds = self.inputs[topic]
        rows, _, errors = decode_rows(messages, ds.fields, ds.name)
        if self.repartition is None:
            return self._emit(self.executor.run(ds.name, rows, state), messages[0], errors)
        result = self.executor.run(ds.name, rows, state, stop_at=self.cut)
        it = Iteration(errors=errors + _row_errors(result, messages[0]), writes=result.writes)
        it.late = result.late
        out, bad = encode_rows(
            self.dataset, result.rows, self.repartition, self.partitions, messages[0],
            f"{self.executor.scope} (repartition)", key_fields=self.partition_by,
            fields=self.cut_schema,
        )  # fmt: skip
        it.outputs += out
        it.errors += bad
        return it

    def _emit(self, result: Any, first: InMessage, errors: list[ErrorRecord]) -> Iteration:
        it = Iteration(errors=errors + _row_errors(result, first), writes=result.writes)
        it.late = result.late
        rows: pd.DataFrame = result.rows
        out, bad = encode_rows(
            self.dataset, rows, self.output_topic, self.partitions, first, self.executor.scope
        )
        it.outputs += out
        it.errors += bad
        return it

    def _index_right(self, ds: spec.DatasetSpec, messages: list[InMessage]) -> Iteration:
        rows, deleted, errors = decode_rows(messages, ds.fields, ds.name)
        wb = WriteBatch()
        if not rows.empty:
            index.upsert(ds, rows, wb, deleted)
        return Iteration(errors=errors, writes=wb)


def _row_errors(result: Any, first: InMessage) -> list[ErrorRecord]:
    return [
        ErrorRecord(e.dataset, "user-code", e.reason, first.topic, first.partition,
                    first.offset, dumps(e.row), e.operator, e.row)
        for e in result.errors
    ]  # fmt: skip


def _cut(p: spec.PipelineSpec) -> str:
    """The node whose output is repartitioned: the input of the first stateful operator."""
    first = next(n for n in p.nodes if isinstance(n, KEYED_NODES))
    cut: str = first.input  # type: ignore[attr-defined]
    ancestors = _ancestors(p, cut)
    seen_cut = False
    for n in p.nodes:
        if n.id == cut:
            seen_cut = True
            continue
        if not seen_cut and n.id not in ancestors:
            raise PipelineError(
                f"pipeline {p.dataset}.{p.name}: node {n.id} runs beside the first stateful "
                f"operator's input ({cut}); the engine repartitions at that operator, so every "
                "earlier node must feed it — move the branch after the stateful operator"
            )
        if seen_cut:
            for parent in _parents(n):
                if parent != cut and parent in ancestors:
                    raise PipelineError(
                        f"pipeline {p.dataset}.{p.name}: node {n.id} reads {parent}, which "
                        f"is before the repartition at {cut}; read from after it instead"
                    )
    return cut


def _parents(n: spec.Node) -> tuple[str, ...]:
    if isinstance(n, spec.UnionNode):
        return n.inputs
    if isinstance(n, spec.InputNode):
        return ()
    return (n.input,)  # type: ignore[attr-defined]


def _ancestors(p: spec.PipelineSpec, node_id: str) -> set[str]:
    by_id = {n.id: n for n in p.nodes}
    out: set[str] = set()
    todo = [node_id]
    while todo:
        cur = todo.pop()
        if cur in out:
            continue
        out.add(cur)
        todo.extend(_parents(by_id[cur]))
    return out
