"""A pipeline's operator DAG on Spark DataFrames: the batch executor of the same IR.

Expression operators compile to native Spark Columns (``batch.expr``). Operators that run
user code (a filter or assign given as a function, a transform) run the engine's own pandas
implementation (``ops.pipeline``) on Arrow batches through ``mapInPandas``: one
implementation of the semantic, vectorised, no per-row UDF (rows whose user code raises are
left out, as the engine leaves them out; the engine also sends them to the dataset's error
topic, which the batch layer does not do yet).

Stateful operators (aggregate over every window kind, first/latest, dedup, changelog) run
the engine's operator code too, which is what makes Spark, the engine and the mock agree by
construction: rows are hash-partitioned by the operator's keys, sorted by event time within
each partition (history replayed in time order, as a backfill sees it: nothing is late), and
each partition's Arrow batches go through ``PipelineExecutor.apply_node`` with an in-memory
state that lives for the partition (``ops.state.MemoryState``: the mock's hangar). Continuous
count/sum/avg/min/max aggregates take a faster road: native Spark window functions
(``batch.native``), and with distinct/LastK/count(unique) one sorted pass per key
(``ops.aggregate.sorted_runs``), proven equal by the same tests. A join is
one sort-merge pass of the left rows and the right dataset's versions (``batch.asof``), with
the engine's lookup semantics.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention
from pyspark.sql import types as T  # noqa: N812

from fennel_dagster.batch import native
from fennel_dagster.batch.asof import asof_join
from fennel_dagster.batch.expr import SparkUnsupported, spark_type, to_column
from fennel_dagster.commit.infer import node_schemas
from fennel_dagster.declare.dtypes import decimal_of
from fennel_dagster.offline.table import arrow_type
from fennel_dagster.ops import aggregate, index
from fennel_dagster.ops.expr import astype
from fennel_dagster.ops.keys import micros
from fennel_dagster.ops.limits import INT64_MAX, INT64_MIN
from fennel_dagster.ops.pipeline import BatchResult, PipelineExecutor
from fennel_dagster.ops.rows import base_type, typed_series
from fennel_dagster.ops.state import MemoryState, WriteBatch
from fennel_dagster.wire import spec


def spark_schema(fields: tuple[spec.FieldSpec, ...] | list[spec.FieldSpec]) -> T.StructType:
    return T.StructType([T.StructField(f.name, spark_type(f.dtype)) for f in fields])


KeyedNode = (
    spec.AggregateNode | spec.FirstNode | spec.LatestNode | spec.DedupNode | spec.ChangelogNode
)


class SparkPipeline:
    def __init__(self, p: spec.PipelineSpec, datasets: Mapping[str, spec.DatasetSpec]) -> None:
        self.p = p
        self.datasets = datasets
        self.scope = f"{p.dataset}.{p.name}"
        self.schemas = node_schemas(p, datasets)

    def run(self, inputs: Mapping[str, DataFrame]) -> DataFrame:
        """The pipeline's output rows, given a DataFrame per input dataset."""
        return self.frame(self.p.output, inputs)

    def frame(self, node_id: str, inputs: Mapping[str, DataFrame]) -> DataFrame:
        """The rows node ``node_id`` emits (e.g. what a terminal aggregate consumes)."""
        frames: dict[str, DataFrame] = {}
        for node in self.p.nodes:
            frames[node.id] = self._apply(node, frames, inputs)
            if node.id == node_id:
                break
        return frames[node_id]

    def _apply(
        self, node: spec.Node, frames: dict[str, DataFrame], inputs: Mapping[str, DataFrame]
    ) -> DataFrame:
        if isinstance(node, spec.AggregateNode) and node.along:  # as the engine: time = along
            ts = next(f.name for f in self.schemas[node.input] if f.timestamp)
            along = frames[node.input].withColumn(ts, F.col(node.along))
            frames = {**frames, node.input: along}
        match node:
            case spec.JoinNode():
                return self._join(node, frames[node.input], inputs[node.right])
            case spec.AggregateNode() if native.eligible(node, self.schemas[node.input]):
                ts = next(f.name for f in self.schemas[node.input] if f.timestamp)
                fields_in, fields_out = self.schemas[node.input], self.schemas[node.id]
                return native.continuous(node, frames[node.input], ts, fields_in, fields_out)
            case (
                spec.AggregateNode()
                | spec.FirstNode()
                | spec.LatestNode()
                | spec.DedupNode()
                | spec.ChangelogNode()
            ):
                return self._keyed(node, frames[node.input])
            case spec.InputNode(dataset=name):
                return inputs[name]
            case spec.UnionNode(inputs=parts):
                out = frames[parts[0]]
                for other in parts[1:]:
                    out = out.unionByName(frames[other])
                return out
            case spec.FilterNode(predicate=pred) if pred is not None:
                return frames[node.input].filter(F.coalesce(to_column(pred), F.lit(False)))
            case spec.AssignNode(columns=cols) if all(c.expr is not None for c in cols):
                df = frames[node.input]
                for c in cols:
                    assert c.expr is not None
                    df = df.withColumn(c.name, to_column(c.expr).cast(spark_type(c.dtype)))
                return df
            case spec.AssignNode():
                return self._assign_in_arrow(node, frames[node.input])
            case spec.FilterNode() | spec.TransformNode():
                return self._in_pandas(node, frames[node.input])
            case spec.ExplodeNode(columns=cols):
                return _explode(frames[node.input], list(cols))
            case spec.DropNode(columns=cols):
                return frames[node.input].drop(*cols)
            case spec.DropNullNode(columns=cols):
                df = frames[node.input]
                return df.dropna(how="any", subset=list(cols) or None)
            case spec.SelectNode(columns=cols):
                ts = next(f.name for f in self.schemas[node.input] if f.timestamp)
                return frames[node.input].select(*dict.fromkeys([*cols, ts]))
            case spec.RenameNode(mapping=mapping):
                return frames[node.input].withColumnsRenamed(dict(mapping))
        raise SparkUnsupported(f"{self.scope}: operator {node!r} is not supported on Spark")

    def _in_pandas(
        self, node: spec.FilterNode | spec.AssignNode | spec.TransformNode, df: DataFrame
    ) -> DataFrame:
        """The engine's implementation of ``node`` on each Arrow batch of ``df``."""
        fields_in = self.schemas[node.input]
        fields_out = self.schemas[node.id]
        executor = PipelineExecutor(self.p, self.datasets)
        ts = next(f.name for f in fields_in if f.timestamp)

        def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
            for pdf in batches:
                typed = pd.DataFrame({f.name: astype(pdf[f.name], f.dtype) for f in fields_in})
                wb = WriteBatch()
                res = BatchResult(rows=pd.DataFrame(), writes=wb)
                out = executor.apply_node(node, typed, ts, MemoryState(), wb, res)
                yield _to_arrow_frame(out, fields_out)

        return df.mapInPandas(run, spark_schema(fields_out))

    def _assign_in_arrow(self, node: spec.AssignNode, df: DataFrame) -> DataFrame:
        """An assign with user code: the engine's implementation on each batch as pandas,
        and only the assigned columns converted back; the others pass through as Arrow (a
        batch where user code failed on some rows, which the engine leaves out, is converted
        whole)."""
        fields_in = self.schemas[node.input]
        fields_out = self.schemas[node.id]
        executor = PipelineExecutor(self.p, self.datasets)
        ts = next(f.name for f in fields_in if f.timestamp)
        assigned = {c.name for c in node.columns}
        made = [f for f in fields_out if f.name in assigned]
        schema = pa.schema([pa.field(f.name, arrow_type(f.dtype)) for f in fields_out])

        def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                pdf = batch.to_pandas()
                typed = pd.DataFrame({f.name: astype(pdf[f.name], f.dtype) for f in fields_in})
                wb = WriteBatch()
                res = BatchResult(rows=pd.DataFrame(), writes=wb)
                out = executor.apply_node(node, typed, ts, MemoryState(), wb, res)
                if len(out) != batch.num_rows:
                    frame = _to_arrow_frame(out, fields_out)
                    yield pa.RecordBatch.from_pandas(frame, schema=schema, preserve_index=False)
                    continue
                new = _to_arrow_frame(out, made)
                yield pa.RecordBatch.from_arrays(
                    [
                        pa.Array.from_pandas(new[f.name], type=schema.field(f.name).type)
                        if f.name in assigned
                        else batch.column(f.name)
                        for f in fields_out
                    ],
                    names=[f.name for f in fields_out],
                )

        return df.mapInArrow(run, spark_schema(fields_out))

    def _partition_keys(self, node: spec.Node) -> list[str]:
        """The columns whose equal values must meet in one task for ``node``'s state."""
        match node:
            case (
                spec.AggregateNode(keys=keys)
                | spec.FirstNode(keys=keys)
                | spec.LatestNode(keys=keys)
            ):
                return list(keys)
            case spec.DedupNode(by=by):
                return list(by) or [f.name for f in self.schemas[node.input] if not f.timestamp]
            case spec.ChangelogNode():
                return list(self._executor.keys_of(node.input))
        raise SparkUnsupported(f"{self.scope}: operator {node!r} is not keyed")

    @property
    def _executor(self) -> PipelineExecutor:
        return PipelineExecutor(self.p, self.datasets)

    def _keyed(self, node: KeyedNode, df: DataFrame) -> DataFrame:
        """A stateful operator over all of ``df``: per key partition, in event-time order, the
        engine's operator with a state that lives for the partition."""
        fields_in = self.schemas[node.input]
        fields_out = self.schemas[node.id]
        ts = next(f.name for f in fields_in if f.timestamp)
        keys = self._partition_keys(node)
        parts = df.repartition(*keys) if keys else df.repartition(1)
        # event time first; the other columns only make ties (same key, same time) repeatable
        ties = [f.name for f in fields_in if not f.timestamp and _orderable(f.dtype)]
        ordered = parts.sortWithinPartitions(ts, *ties)
        executor = self._executor
        closing = (  # windows that emit when they close: a windowed aggregate or dedup
            isinstance(node, spec.AggregateNode) and not aggregate.is_continuous(node)
        ) or (isinstance(node, spec.DedupNode) and node.window is not None)
        # windows close by the watermark of the whole input, not of one partition's keys
        top = df.agg(F.max(ts)).first() if closing else None  # one small Spark job
        newest = None if top is None else top[0]
        mark = None if newest is None else micros(pd.Timestamp(newest))

        def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
            state = MemoryState()
            for pdf in whole_instants(batches, ts):
                typed = pd.DataFrame({f.name: astype(pdf[f.name], f.dtype) for f in fields_in})
                if index.DELETED in pdf.columns:  # an upsert dataset's tombstones
                    typed[index.DELETED] = _deleted(pdf)
                wb = WriteBatch()
                res = BatchResult(rows=pd.DataFrame(), writes=wb)
                out = executor.apply_node(node, typed, ts, state, wb, res)
                state.apply(wb)
                yield _to_arrow_frame(out, fields_out)
            if mark is not None:
                empty = pd.DataFrame({f.name: pd.Series(dtype=object) for f in fields_in})
                if isinstance(node, spec.DedupNode):  # its rows come back in these types
                    typed = pd.DataFrame({f.name: astype(empty[f.name], f.dtype)
                                          for f in fields_in})  # fmt: skip
                    rows = executor._dedup(node, typed, ts, state, WriteBatch(), watermark=mark)
                else:
                    assert isinstance(node, spec.AggregateNode)
                    rows, _ = aggregate.run_windowed(
                        node, executor.scope, empty, ts, state, WriteBatch(), watermark=mark
                    )
                yield _to_arrow_frame(rows, fields_out)

        return ordered.mapInPandas(run, spark_schema(fields_out))

    def _join(self, node: spec.JoinNode, left: DataFrame, right: DataFrame) -> DataFrame:
        """As-of join: one sort-merge pass of the left rows with the right versions
        (``batch.asof``), the engine's lookup semantics."""
        joined = asof_join(node, left, right, self.schemas[node.input], self.datasets)
        return joined.select(*[f.name for f in self.schemas[node.id]])


def _deleted(rows: pd.DataFrame) -> pd.Series | None:
    """The delete flags of an upsert dataset's rows (offline tables keep tombstones)."""
    if index.DELETED not in rows.columns:
        return None
    return rows[index.DELETED].astype("boolean").fillna(False).astype(bool)


def _orderable(dtype: spec.DType) -> bool:
    """Spark sorts scalars and arrays of them, not maps or structs."""
    while isinstance(dtype, spec.OptionalType | spec.ListType):
        dtype = dtype.of
    return not isinstance(dtype, spec.MapType | spec.StructType)


def whole_instants(batches: Iterator[pd.DataFrame], ts: str) -> Iterator[pd.DataFrame]:
    """Re-cut time-ordered Arrow batches so rows of one timestamp never straddle two: an
    operator then breaks ties its own way, as it does for one big batch (the mock's)."""
    held: pd.DataFrame | None = None
    for pdf in batches:
        if held is not None:
            pdf = pd.concat([held, pdf], ignore_index=True)
        if pdf.empty:
            held = pdf
            continue
        last = pdf[ts].iloc[-1]
        tail = (pdf[ts] == last).to_numpy()
        held = pdf[tail]
        if (~tail).any():
            yield pdf[~tail].reset_index(drop=True)
    if held is not None and not held.empty:
        yield held.reset_index(drop=True)


def _explode(df: DataFrame, cols: list[str]) -> DataFrame:
    """pandas' ``explode`` of one or more same-length list columns: an empty or null list
    gives one row with nulls."""
    if len(cols) == 1:
        return df.withColumn(cols[0], F.explode_outer(cols[0]))
    zipped = "__fennel_zip"
    out = df.withColumn(zipped, F.explode_outer(F.arrays_zip(*cols)))
    picked: dict[str, Column] = {c: F.col(f"{zipped}.{c}").alias(c) for c in cols}
    return out.select(*[picked.get(c, F.col(c)) for c in df.columns])


_TYPED_HERE = (spec.ListType, spec.DateType, spec.TimestampType)


def _to_arrow_frame(df: pd.DataFrame, fields: list[spec.FieldSpec]) -> pd.DataFrame:
    """Columns in schema order, as Arrow takes them back (object columns for nullables).

    A row with an int beyond int64 (an int Sum that overflowed) or an infinite float is left
    out: the engine makes it an error row (``ops.limits``), and Arrow would fail the whole
    Spark task on the int."""
    out = {}
    fits = pd.Series(True, index=df.index)
    for f in fields:
        s = df[f.name] if f.name in df.columns else pd.Series([None] * len(df), dtype=object)
        if s.dtype == object and isinstance(base_type(f.dtype), spec.IntType):
            fits &= s.map(lambda v: not isinstance(v, int) or INT64_MIN <= v <= INT64_MAX)
        elif isinstance(base_type(f.dtype), spec.FloatType):  # inf is not stored either
            values = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
            fits &= ~np.isinf(values)
        elif isinstance(dec := base_type(f.dtype), spec.DecimalType):  # a float sum: its scale
            s = pd.Series([decimal_of(v, dec.scale) for v in s.tolist()], index=s.index,
                          dtype=object)  # fmt: skip
        elif s.dtype == object and isinstance(base_type(f.dtype), _TYPED_HERE):
            # a LastK of dates, or a default held as text (a Min of dates): typed as the field
            s = pd.Series(typed_series(s.tolist(), f.dtype).tolist(), index=s.index, dtype=object)
        out[f.name] = s.astype(object).where(s.notna(), None) if s.dtype != object else s
    frame = pd.DataFrame(out)
    return frame if bool(fits.all()) else frame[fits.to_numpy()].reset_index(drop=True)
