"""A pipeline's operator DAG on Spark DataFrames: the batch executor of the same IR.

Expression operators compile to native Spark Columns (``batch.expr``). Operators that run
user code (a filter or assign given as a function, a transform) run the engine's own pandas
implementation (``ops.pipeline``) on Arrow batches through ``mapInPandas``: one
implementation of the semantic, vectorised, no per-row UDF (rows whose user code raises are
left out, as the engine leaves them out; the engine also sends them to the dataset's error
topic, which the batch layer does not do yet). Keyed and stateful operators
(joins, aggregates, first/latest, dedup, changelog) are the next step of the batch layer;
until they land, ``run`` refuses them by name rather than computing something else.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention
from pyspark.sql import types as T  # noqa: N812

from fennel_dagster.batch.expr import SparkUnsupported, spark_type, to_column
from fennel_dagster.commit.infer import node_schemas
from fennel_dagster.commit.stages import STATEFUL_NODES
from fennel_dagster.ops.expr import astype
from fennel_dagster.ops.pipeline import BatchResult, PipelineExecutor
from fennel_dagster.ops.state import MemoryState, WriteBatch
from fennel_dagster.wire import spec


def spark_schema(fields: tuple[spec.FieldSpec, ...] | list[spec.FieldSpec]) -> T.StructType:
    return T.StructType([T.StructField(f.name, spark_type(f.dtype)) for f in fields])


class SparkPipeline:
    def __init__(self, p: spec.PipelineSpec, datasets: Mapping[str, spec.DatasetSpec]) -> None:
        self.p = p
        self.datasets = datasets
        self.scope = f"{p.dataset}.{p.name}"
        self.schemas = node_schemas(p, datasets)

    def run(self, inputs: Mapping[str, DataFrame]) -> DataFrame:
        """The pipeline's output rows, given a DataFrame per input dataset."""
        frames: dict[str, DataFrame] = {}
        for node in self.p.nodes:
            frames[node.id] = self._apply(node, frames, inputs)
        return frames[self.p.output]

    def _apply(
        self, node: spec.Node, frames: dict[str, DataFrame], inputs: Mapping[str, DataFrame]
    ) -> DataFrame:
        if isinstance(node, STATEFUL_NODES):
            kind = type(node).__name__.removesuffix("Node").lower()
            raise SparkUnsupported(
                f"{self.scope} ({kind} {node.id}): the Spark executor does not run {kind} yet"
            )
        match node:
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
            case spec.FilterNode() | spec.AssignNode() | spec.TransformNode():
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


def _explode(df: DataFrame, cols: list[str]) -> DataFrame:
    """pandas' ``explode`` of one or more same-length list columns: an empty or null list
    gives one row with nulls."""
    if len(cols) == 1:
        return df.withColumn(cols[0], F.explode_outer(cols[0]))
    zipped = "__fennel_zip"
    out = df.withColumn(zipped, F.explode_outer(F.arrays_zip(*cols)))
    picked: dict[str, Column] = {c: F.col(f"{zipped}.{c}").alias(c) for c in cols}
    return out.select(*[picked.get(c, F.col(c)) for c in df.columns])


def _to_arrow_frame(df: pd.DataFrame, fields: list[spec.FieldSpec]) -> pd.DataFrame:
    """Columns in schema order, as Arrow takes them back (object columns for nullables)."""
    out = {}
    for f in fields:
        s = df[f.name] if f.name in df.columns else pd.Series([None] * len(df), dtype=object)
        out[f.name] = s.astype(object).where(s.notna(), None) if s.dtype != object else s
    return pd.DataFrame(out)
