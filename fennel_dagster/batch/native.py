"""Continuous-window aggregates as native Spark window functions: the fast path of a backfill.

A continuous aggregate emits, per event, the aggregates of its key's events with time in
``[t - duration, t]`` (``forever``: all up to ``t``), both ends included as in Fennel:
exactly a Spark window partitioned by the key, ordered by event time in microseconds, with
the range frame ``[t - duration, t]``. Count, sum, avg, min and max over int or float columns
run so, in the JVM, with no Python per row. But Spark recomputes a sliding frame
for every row (O(window) per row: 4 sums over a 7-day window of 1,000 events per key took
98 s for 1M events), and Distinct, LastK and count(unique) have no frame form at all. So a
node with any of those, or with a window longer than ``JVM_FRAME_MAX_S``, takes one pass
over each key's time-sorted history for all its aggregations instead (``batch.sorted_pass``:
amortised O(1) per event, exact sums as the engine's). Any other aggregation (or a decimal column) keeps the node on
the engine's operator code (``batch.pipeline``). ``tests/batch`` proves the paths equal to
the mock.

One difference in the last bits only: a float sum here is Spark's running double sum, the
engine's is the correctly rounded exact sum.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention

from fennel_dagster.batch import sorted_pass
from fennel_dagster.batch.expr import spark_type
from fennel_dagster.ops.aggregate.lookup import is_continuous
from fennel_dagster.ops.limits import INT64_MAX, INT64_MIN
from fennel_dagster.ops.rows import base_type
from fennel_dagster.wire import spec

NATIVE_KINDS = ("count", "sum", "avg", "min", "max")
EXACT_INT = "decimal(38,0)"

# Spark recomputes a sliding frame per row, so its cost grows with the rows a key has in the
# window; a running frame (``forever``) is O(1). Measured side by side (bench/README.md): at
# tens of rows per key and frame (1 h windows) the JVM does Count+Sum at 350k events per
# CPU-second to the sorted runs' 196k; at thousands (a 1-day count over 200 merchants) it
# takes 25 CPU-s per 1M events to the runs' ~8. Longer windows than this go to sorted runs.
JVM_FRAME_MAX_S = 3600


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


def _all_in_jvm(node: spec.AggregateNode, types: dict[str, spec.DType]) -> bool:
    return all(_in_jvm(a, types) for a in node.aggs)


def eligible(node: spec.AggregateNode, fields_in: list[spec.FieldSpec]) -> bool:
    if not is_continuous(node):
        return False
    types = {f.name: f.dtype for f in fields_in}
    return _all_in_jvm(node, types) or sorted_pass.takes(node, types)


def continuous(
    node: spec.AggregateNode,
    df: DataFrame,
    ts: str,
    fields_in: list[spec.FieldSpec],
    fields_out: list[spec.FieldSpec],
) -> DataFrame:
    """The node's per-event rows: Spark window functions, or one sorted pass per key."""
    t = "__fennel_t"
    out_types = {f.name: spark_type(f.dtype) for f in fields_out}
    fields_out_types = {f.name: f.dtype for f in fields_out}
    rows = df.withColumn(t, F.unix_micros(F.col(ts)))
    if not _all_in_jvm(node, {f.name: f.dtype for f in fields_in}):
        return sorted_pass.sorted_pass(node, rows, ts, t, fields_out)
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
