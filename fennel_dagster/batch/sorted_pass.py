"""Continuous-window aggregates in one pass over each key's time-sorted history, on Spark.

The rows are hash-partitioned by the node's keys and sorted by (keys, time); ``mapInArrow``
feeds each partition's Arrow batches to ``ops.aggregate.sorted_runs.SortedRuns`` (amortised
O(1) per event, exact sums as the engine's). Spark's window functions recompute a sliding
frame per row and have no form for Distinct, LastK or count(unique), so ``batch.native``
sends such nodes here.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention
from pyspark.sql import types as T  # noqa: N812
from pyspark.sql.pandas.types import to_arrow_type

from fennel_dagster.batch.expr import spark_type
from fennel_dagster.ops.aggregate.layout import of_columns
from fennel_dagster.ops.aggregate.sorted_runs import SortedRuns, runnable
from fennel_dagster.ops.rows import base_type
from fennel_dagster.wire import spec

RUN_TYPES = spec.IntType | spec.FloatType | spec.StringType | spec.BoolType
RUN = "__fennel_run"  # the sorted-run columns, before their final names and types


def takes(node: spec.AggregateNode, types: dict[str, spec.DType]) -> bool:
    """Whether every aggregation of ``node`` runs in the pass: a sorted run reads every
    column the node reads (its ties' order) and hashes its keys."""
    scalar = spec.IntType | spec.StringType
    return (
        all(runnable(a) and (a.of is None or _run_type(types[a.of])) for a in node.aggs)
        and all(_run_type(types[c]) for c in of_columns(node))
        and all(isinstance(base_type(types[k]), scalar) for k in node.keys)
    )


def _run_type(dtype: spec.DType) -> bool:
    return isinstance(base_type(dtype), RUN_TYPES)


def sorted_pass(
    node: spec.AggregateNode, rows: DataFrame, ts: str, t: str, fields_out: list[spec.FieldSpec]
) -> DataFrame:
    """The node's rows (``t``: event time in µs); the rows the engine makes error rows (an
    int sum beyond int64, an infinite float) left out."""
    reads = of_columns(node)
    kept = list(dict.fromkeys([*node.keys, t, *reads]))
    parts = rows.select(*kept, F.col(ts).alias(RUN + ts))
    parts = parts.repartition(*node.keys).sortWithinPartitions(*node.keys, t)
    out_types = {f.name: spark_type(f.dtype) for f in fields_out}
    schema = T.StructType(
        [
            *[T.StructField(k, parts.schema[k].dataType) for k in node.keys],
            *[T.StructField(a.into, out_types[a.into]) for a in node.aggs],
            T.StructField(ts, parts.schema[RUN + ts].dataType),
        ]
    )
    arrow = {a.into: to_arrow_type(out_types[a.into]) for a in node.aggs}
    names = [f.name for f in schema.fields]
    floats = {f.name for f in parts.schema.fields if isinstance(f.dataType, T.DoubleType)}
    keys, aggs = list(node.keys), list(node.aggs)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        runs = SortedRuns(aggs, reads, floats & set(reads))
        for table, key_of, times in _whole_instants(batches, keys, t):
            cols = {c: _json_safe(table.column(c).to_pylist(), c in floats) for c in reads}
            fed = runs.feed(key_of, times, cols)
            values = fed.values
            if not all(fed.ok):  # error rows on the engine: an int beyond int64 fails Arrow
                keep = [i for i, fine in enumerate(fed.ok) if fine]
                table = table.take(keep)
                values = {into: [v[i] for i in keep] for into, v in values.items()}
            arrays = [  # keys and time as Spark sent them (its session's time zone)
                *[table.column(k) for k in keys],
                *[pa.array(values[a.into], type=arrow[a.into]) for a in aggs],
                table.column(RUN + ts),
            ]
            yield from pa.Table.from_arrays(arrays, names=names).to_batches()

    return parts.mapInArrow(run, schema)


def _json_safe(values: list[Any], floats: bool) -> list[Any]:
    """NaN reads as null, as the engine's records hold it."""
    return [None if v != v else v for v in values] if floats else values


def _whole_instants(
    batches: Iterator[pa.RecordBatch], keys: Sequence[str], t: str
) -> Iterator[tuple[pa.Table, list[Any], list[int]]]:
    """Arrow batches sorted by (keys, time) re-cut so the rows of one (key, time) never
    straddle two, with each row's key and time (``SortedRuns`` orders one instant's rows
    itself, as the engine does)."""
    held: pa.Table | None = None
    for batch in batches:
        table = pa.Table.from_batches([batch])
        if held is not None:
            table = pa.concat_tables([held, table])
        key_of = _keys(table, keys)
        times = table.column(t).to_pylist()
        n = len(times)
        if n == 0:
            continue
        cut = n - 1
        while cut > 0 and times[cut - 1] == times[n - 1] and key_of[cut - 1] == key_of[n - 1]:
            cut -= 1
        held = table.slice(cut)
        if cut:
            yield table.slice(0, cut), key_of[:cut], times[:cut]
    if held is not None and held.num_rows:
        yield held, _keys(held, keys), held.column(t).to_pylist()


def _keys(table: pa.Table, keys: Sequence[str]) -> list[Any]:
    if len(keys) == 1:
        return table.column(keys[0]).to_pylist()
    return list(zip(*[table.column(k).to_pylist() for k in keys], strict=True))
