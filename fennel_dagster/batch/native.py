"""Continuous-window aggregates as native Spark window functions: the fast path of a backfill.

A continuous aggregate emits, per event, the aggregates of its key's events with time in
``[t - duration, t]`` (``forever``: all up to ``t``), both ends included as in Fennel:
exactly a Spark window partitioned by the key, ordered by event time in microseconds, with
the range frame ``[t - duration, t]``. Count, sum, avg, min and max over int or float columns
run so, in the JVM, with no Python per row. But Spark recomputes a sliding frame
for every row (O(window) per row: 4 sums over a 7-day window of 1,000 events per key took
98 s for 1M events), and Distinct, LastK and count(unique) have no frame form at all. So a
node with any of those, or with a window longer than ``JVM_FRAME_MAX_S``, takes one pass over each key's time-sorted history in ``mapInArrow``
for all its aggregations instead (``ops.aggregate.sorted_runs``: amortised O(1) per event,
exact sums as the engine's). Any other aggregation (or a decimal column) keeps the node on
the engine's operator code (``batch.pipeline``). ``tests/batch`` proves the paths equal to
the mock.

One difference in the last bits only: a float sum here is Spark's running double sum, the
engine's is the correctly rounded exact sum.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention
from pyspark.sql import types as T  # noqa: N812
from pyspark.sql.pandas.types import to_arrow_type

from fennel_dagster.batch.expr import spark_type
from fennel_dagster.ops.aggregate.layout import of_columns
from fennel_dagster.ops.aggregate.sorted_runs import SortedRuns, runnable
from fennel_dagster.ops.limits import INT64_MAX, INT64_MIN
from fennel_dagster.ops.rows import base_type
from fennel_dagster.wire import spec

NATIVE_KINDS = ("count", "sum", "avg", "min", "max")
EXACT_INT = "decimal(38,0)"


RUN_TYPES = spec.IntType | spec.FloatType | spec.StringType | spec.BoolType
# Spark recomputes a sliding frame per row, so its cost grows with the rows a key has in the
# window; a running frame (``forever``) is O(1). Measured side by side (bench/README.md): at
# tens of rows per key and frame (1 h windows) the JVM does Count+Sum at 350k events per
# CPU-second to the sorted runs' 196k; at thousands (a 1-day count over 200 merchants) it
# takes 25 CPU-s per 1M events to the runs' ~8. Longer windows than this go to sorted runs.
JVM_FRAME_MAX_S = 3600
RUN = "__fennel_run"  # the sorted-run columns, before their final names and types


def _numeric(dtype: spec.DType) -> bool:
    return isinstance(base_type(dtype), spec.IntType | spec.FloatType)


def _in_jvm(a: spec.AggSpec, types: dict[str, spec.DType]) -> bool:
    if a.kind not in NATIVE_KINDS or a.window.lookback:
        return False
    if a.window.kind == "continuous" and (a.window.duration or 0) > JVM_FRAME_MAX_S:
        return False
    if a.window.kind not in ("continuous", "forever") or (a.kind == "count" and a.unique):
        return False
    return a.of is None or _numeric(types[a.of])


def _in_run(a: spec.AggSpec, types: dict[str, spec.DType]) -> bool:
    return runnable(a) and (a.of is None or isinstance(base_type(types[a.of]), RUN_TYPES))


def _all_in_jvm(node: spec.AggregateNode, types: dict[str, spec.DType]) -> bool:
    return all(_in_jvm(a, types) for a in node.aggs)


def eligible(node: spec.AggregateNode, fields_in: list[spec.FieldSpec]) -> bool:
    types = {f.name: f.dtype for f in fields_in}
    if _all_in_jvm(node, types):
        return True
    if not all(_in_run(a, types) for a in node.aggs):
        return False
    # a sorted run reads every column the node reads (its ties' order) and hashes its keys
    scalar = spec.IntType | spec.StringType
    return all(isinstance(base_type(types[c]), RUN_TYPES) for c in of_columns(node)) and all(
        isinstance(base_type(types[k]), scalar) for k in node.keys
    )


def continuous(
    node: spec.AggregateNode,
    df: DataFrame,
    ts: str,
    fields_in: list[spec.FieldSpec],
    fields_out: list[spec.FieldSpec],
) -> DataFrame:
    """The node's per-event rows: Spark window functions, or sorted runs (``_runs``)."""
    t = "__fennel_t"
    out_types = {f.name: spark_type(f.dtype) for f in fields_out}
    fields_out_types = {f.name: f.dtype for f in fields_out}
    rows = df.withColumn(t, F.unix_micros(F.col(ts)))
    if not _all_in_jvm(node, {f.name: f.dtype for f in fields_in}):
        return _runs(node, rows, ts, t, fields_out)
    cols: list[Column] = [F.col(k) for k in node.keys]
    fits: list[Column] = []
    for a in node.aggs:
        base = Window.partitionBy(*node.keys).orderBy(F.col(t))
        if a.window.kind == "forever" or a.window.duration is None:
            frame = base.rangeBetween(Window.unboundedPreceding, 0)
        else:
            frame = base.rangeBetween(-(a.window.duration * 1_000_000), 0)
        int_sum = a.kind == "sum" and isinstance(base_type(fields_out_types[a.into]), spec.IntType)
        value = _agg(a, exact=int_sum).over(frame)
        empty = _empty(a)
        if empty is not None:
            value = F.coalesce(value, F.lit(empty))
        if isinstance(base_type(fields_out_types[a.into]), spec.FloatType):
            # an error row on the engine; null (an empty min/max) is fine
            fits.append(F.coalesce(~value.isin(float("inf"), float("-inf")), F.lit(True)))
        if int_sum:
            # an int sum that leaves int64 is an error row on the engine: left out here too
            # (never wrapped around, never an ArithmeticException that fails the backfill)
            fits.append(value.between(F.lit(INT64_MIN), F.lit(INT64_MAX)))
        cols.append(value.cast(out_types[a.into]).alias(a.into))
    cols.append(F.col(ts))
    if not fits:
        return rows.select(*cols)
    ok = "__fennel_fits"
    fit = fits[0]
    for more in fits[1:]:
        fit = fit & more
    return rows.select(*cols, fit.alias(ok)).where(F.col(ok)).drop(ok)


def _agg(a: spec.AggSpec, exact: bool = False) -> Column:
    if a.kind == "count":
        return F.count(F.col(a.of)) if a.of and a.dropnull else F.count(F.lit(1))
    assert a.of is not None
    if a.kind == "sum" and exact:  # decimal(38, 0) holds any realistic sum of int64 values
        return F.sum(F.col(a.of).cast(EXACT_INT))
    fn = {"sum": F.sum, "avg": F.avg, "min": F.min, "max": F.max}[a.kind]
    return fn(F.col(a.of))


def _empty(a: spec.AggSpec) -> object:
    """The engine's value of a window with no values: sum 0, count 0, else the default."""
    return 0 if a.kind in ("sum", "count") else a.default


def _runs(
    node: spec.AggregateNode, rows: DataFrame, ts: str, t: str, fields_out: list[spec.FieldSpec]
) -> DataFrame:
    """The node's rows from one pass over each key's history in time order: hash-partitioned
    by the keys, sorted by (keys, time), ``SortedRuns`` over the Arrow batches; the rows the
    engine makes error rows (an int sum beyond int64, an infinite float) left out."""
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
    straddle two, with each row's key and time."""
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
