"""As-of joins on Spark as one sort-merge pass: the engine's lookup semantics, no per-row
Python and no per-key state.

The left rows and the right dataset's versions are unioned, partitioned by the join key and
sorted by (event time, right before left, the version's content sequence); a running
``last(version, ignorenulls)`` over that order gives each left row the key's newest version
at or before its time — what ``ops.index.lookup`` answers from the engine's hangar. The
right side's tie-breaker (``ops.rows.content_seq``) and tombstones come from the engine's
own code in ``mapInPandas``; a key with millions of versions is one sorted partition,
streamed, never held in memory. ``within`` bounds how old the version may be; a tombstone
reads as "not found"; ``how="inner"`` keeps the found rows only.

A small right side (``BROADCAST_VERSIONS``, few versions per key) takes another road with the
same answers: each version's validity interval, one broadcast join, no shuffle of the left.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pandas as pd
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention
from pyspark.sql import types as T  # noqa: N812

from fennel_dagster.batch.expr import spark_type
from fennel_dagster.ops import index
from fennel_dagster.ops.expr import astype
from fennel_dagster.ops.rows import dumps, to_records
from fennel_dagster.wire import spec

SEQ, GONE, TIME, SIDE, LEFT, RIGHT, HIT, FOUND, TIED = (
    "__seq", "__gone", "__t", "__side", "__left", "__right", "__hit", "__found", "__tied",
)  # fmt: skip
BROADCAST_TIES = 1_000_000  # (key, time) pairs with several versions: sent to every task
# A right side of at most this many versions, none with more than DENSE_KEY per key, is sent
# to every task (``_broadcast_lookup``): each left row then scans its key's versions only.
BROADCAST_VERSIONS = 200_000
DENSE_KEY = 64


def _versions(right: DataFrame, ds: spec.DatasetSpec, tied_n: int | None = None) -> DataFrame:
    """The right rows with each version's content sequence and tombstone flag, as the
    engine's index computes them (``ops.index.upsert``). The sequence only orders versions of
    one key at one instant, so only such ties pay for it (the engine's JSON + CRC in
    ``mapInPandas``); every other row gets 0, computed by Spark. Finding the ties is one
    narrow scan (keys and time) — a Parquet/Delta read of two columns (``tied_n``: their
    number when known, ``_tie_counts``)."""
    fields = list(ds.fields)
    names = [f.name for f in fields]
    has_deleted = index.DELETED in right.columns
    cols = [*names, *([index.DELETED] if has_deleted else [])]
    gone = F.coalesce(F.col(index.DELETED), F.lit(False)) if has_deleted else F.lit(False)
    plain = [*[F.col(n) for n in names], F.lit(0).cast("long").alias(SEQ), gone.alias(GONE)]
    key_ts = [*ds.keys, ds.timestamp]
    dups = right.groupBy(*key_ts).count().where(F.col("count") > 1).select(*key_ts)
    if tied_n is None:
        tied_n = dups.count()  # a small job; almost always 0
    if tied_n == 0:
        return right.select(*plain)
    marks = (F.broadcast(dups) if tied_n <= BROADCAST_TIES else dups).withColumn(TIED, F.lit(True))
    marked = right.select(*cols).join(marks, key_ts, "left")

    def seqs(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in batches:
            typed = pd.DataFrame({f.name: astype(pdf[f.name], f.dtype) for f in fields})
            gone = (pdf[index.DELETED].astype("boolean").fillna(False).astype(bool)
                    if has_deleted else pd.Series(False, index=pdf.index))  # fmt: skip
            out = pdf[names].copy()
            recs = to_records(typed, names)
            out[SEQ] = [zlib.crc32(dumps({**r, index.DELETED: True} if g else r))
                        for r, g in zip(recs, gone.tolist(), strict=True)]  # fmt: skip
            out[GONE] = gone.to_numpy()
            yield out

    schema = T.StructType([
        *[T.StructField(f.name, spark_type(f.dtype)) for f in fields],
        T.StructField(SEQ, T.LongType()), T.StructField(GONE, T.BooleanType()),
    ])  # fmt: skip
    tied = marked.where(F.col(TIED).isNotNull()).select(*cols).mapInPandas(seqs, schema)
    return marked.where(F.col(TIED).isNull()).select(*plain).unionByName(tied)


def asof_join(
    node: spec.JoinNode,
    left: DataFrame,
    right: DataFrame,
    left_fields: list[spec.FieldSpec],
    datasets: Mapping[str, spec.DatasetSpec],
) -> DataFrame:
    """``left`` with the joined fields of ``node.right`` as of each left row's time."""
    ds = datasets[node.right]
    ts = next(f.name for f in left_fields if f.timestamp)
    wanted = list(node.fields) or [f.name for f in ds.fields if not f.key and not f.timestamp]
    kept = [f for f in left_fields if f.name not in wanted]  # a joined field replaces it
    typed = left.select(*[F.col(f.name).cast(spark_type(f.dtype)).alias(f.name) for f in kept])
    # within=(before, after): the version as of t + after, absent if older than t - before
    shift, span = index.join_reach(node.within_before, node.within_after)
    at = F.col(ts) + F.expr(f"INTERVAL {int(shift)} SECONDS") if shift else F.col(ts)
    out = asof_lookup(
        typed, list(node.left_on), at, right, ds, list(node.right_on), wanted, span,
    )  # fmt: skip
    if node.how == "inner":
        out = out.where(F.col(FOUND))
    return out.drop(FOUND)


def _tie_counts(rights: list[Versions], key_cols: list[T.DataType]) -> list[int]:
    """Per dataset, how many (key, time) pairs have several versions: one narrow scan and
    one small job for all of them, not one job each."""
    if len(rights) == 1:
        return [_versions_ties(rights[0])]
    idx, keys = "__ds", [f"__k{i}" for i in range(len(key_cols))]
    narrow = [
        r.frame.select(
            F.lit(i).alias(idx),
            *[F.col(rc).cast(kt).alias(k) for k, rc, kt in zip(keys, r.on, key_cols, strict=True)],
            F.col(r.ds.timestamp).alias(TIME),
        )
        for i, r in enumerate(rights)
    ]
    union = narrow[0]
    for part in narrow[1:]:
        union = union.unionByName(part)
    dups = union.groupBy(idx, *keys, TIME).count().where(F.col("count") > 1)
    counts = {row[0]: row[1] for row in dups.groupBy(idx).count().collect()}
    return [counts.get(i, 0) for i in range(len(rights))]


def _versions_ties(r: Versions) -> int:
    key_ts = [*r.ds.keys, r.ds.timestamp]
    return r.frame.groupBy(*key_ts).count().where(F.col("count") > 1).count()


@dataclass(frozen=True)
class _Shape:
    """How many versions a dataset has, at most per key, and how many (key, time) ties."""

    rows: int
    per_key: int
    ties: int

    @property
    def broadcast(self) -> bool:
        return self.rows <= BROADCAST_VERSIONS and self.per_key <= DENSE_KEY


def _shape(r: Versions) -> _Shape:
    """One small job (two narrow aggregations of the keys and times)."""
    per_instant = r.frame.groupBy(*r.ds.keys, r.ds.timestamp).count()
    per_key = per_instant.groupBy(*r.ds.keys).agg(
        F.sum("count").alias("n"), F.sum(F.when(F.col("count") > 1, 1).otherwise(0)).alias("t")
    )
    row = per_key.agg(F.sum("n"), F.max("n"), F.sum("t")).first()
    if row is None or row[0] is None:
        return _Shape(0, 0, 0)
    return _Shape(int(row[0]), int(row[1]), int(row[2]))


def _key_types(r: Versions) -> list[T.DataType]:
    """The Spark types both sides' key columns are cast to: the dataset's key fields'."""
    types = {f.name: spark_type(f.dtype) for f in r.ds.fields}
    return [types[rc] for rc in r.on]


def _keyed(names: list[str], cols: list[str], types: list[T.DataType]) -> list[Column]:
    return [F.col(c).cast(t).alias(k) for k, c, t in zip(names, cols, types, strict=True)]


def _visible(h: Column, within_before: int | None) -> Column:
    """Whether the version ``h`` a row met answers it: there is one, it is not a delete,
    and it is recent enough (``within_before`` seconds)."""
    fresh = F.lit(True) if within_before is None else (
        F.col(TIME) - h[TIME] <= F.lit(int(within_before) * 1_000_000))  # fmt: skip
    return h.isNotNull() & ~h[GONE] & fresh


def _broadcast_lookup(
    left: DataFrame,
    left_on: list[str],
    left_time: Column,
    r: Versions,
    ties: int,
    within_before: int | None,
) -> DataFrame:
    """``asof_lookup`` for a small right side: each version knows until when it is the
    newest of its key (the next version's time, ties in content-sequence order as the pass
    orders them), and the left rows meet the one that covers their time in a broadcast
    join — no shuffle and no sort of the left rows, however skewed their keys."""
    keys = [f"__k{i}" for i in range(len(left_on))]
    rkeys = [f"__rk{i}" for i in range(len(left_on))]
    key_cols = _key_types(r)
    versions = _versions(r.frame, r.ds, ties)
    since, until = "__since", "__until"
    right = versions.select(
        *_keyed(rkeys, r.on, key_cols),
        F.unix_micros(F.col(r.ds.timestamp)).alias(since), F.col(SEQ),
        F.struct(F.unix_micros(F.col(r.ds.timestamp)).alias(TIME), F.col(GONE),
                 *[F.col(w) for w in r.wanted]).alias(RIGHT),
    )  # fmt: skip
    right = right.withColumn(
        until, F.lead(since).over(Window.partitionBy(*rkeys).orderBy(since, SEQ))
    )
    kept = left.columns
    rows = left.select(
        *[F.col(c) for c in kept], *_keyed(keys, left_on, key_cols),
        F.unix_micros(left_time).alias(TIME),
    )  # fmt: skip
    cond = (F.col(since) <= F.col(TIME)) & (F.col(until).isNull() | (F.col(TIME) < F.col(until)))
    for k, rk in zip(keys, rkeys, strict=True):
        cond = cond & (F.col(k) == F.col(rk))
    joined = rows.join(F.broadcast(right), cond, "left")
    h = F.col(RIGHT)
    ok = _visible(h, within_before)
    return joined.select(
        *[F.col(c) for c in kept],
        F.when(ok, h).alias(hit(0)),
        ok.alias(found(0)),
    )


@dataclass(frozen=True)
class Versions:
    """One dataset's side of an as-of lookup: its rows (and tombstones, e.g. its offline
    table), its key fields matched to the requests' key columns, and the fields wanted."""

    frame: DataFrame
    ds: spec.DatasetSpec
    on: list[str]
    wanted: list[str]


def hit(i: int) -> str:
    """The column of ``asof_hits``' answer from its ``i``-th dataset: a struct of the wanted
    fields, null when not found."""
    return f"__hit{i}"


def found(i: int) -> str:
    return f"__found{i}"


def asof_hits(
    left: DataFrame,
    left_on: list[str],
    left_time: Column,
    rights: list[Versions],
    within_before: int | None = None,
    ties: list[int] | None = None,
) -> DataFrame:
    """Every row of ``left`` with, per dataset ``i`` of ``rights``, its newest version at or
    before ``left_time`` whose key equals the row's ``left_on`` (``hit(i)``: the wanted
    fields; ``found(i)``). Datasets looked up by the same key columns share one pass: their
    versions and the requests are one union, one shuffle and one sort, with a running
    ``last`` per dataset (each sees only its own versions). ``ties``: each dataset's number
    of (key, time) ties when known."""
    keys = [f"__k{i}" for i in range(len(left_on))]
    key_cols = _key_types(rights[0])
    kept = left.columns
    left_type = left.select(F.struct(*kept)).schema[0].dataType
    if ties is None:
        ties = _tie_counts(rights, key_cols)
    versions = [_versions(r.frame, r.ds, n) for r, n in zip(rights, ties, strict=True)]
    shapes = [
        F.struct(F.unix_micros(F.col(r.ds.timestamp)).alias(TIME), F.col(GONE),
                 *[F.col(w) for w in r.wanted])
        for r in rights
    ]  # fmt: skip
    types = [v.select(shape).schema[0].dataType for v, shape in zip(versions, shapes, strict=True)]
    nothing = [F.lit(None).cast(t) for t in types]
    parts = []
    for i, (r, v) in enumerate(zip(rights, versions, strict=True)):
        parts.append(v.select(
            *_keyed(keys, r.on, key_cols),
            F.unix_micros(F.col(r.ds.timestamp)).alias(TIME), F.lit(0).alias(SIDE), F.col(SEQ),
            F.lit(None).cast(left_type).alias(LEFT),
            *[(shapes[i] if j == i else nothing[j]).alias(f"{RIGHT}{j}") for j in range(len(rights))],
        ))  # fmt: skip
    parts.append(left.select(
        *_keyed(keys, left_on, key_cols),
        F.unix_micros(left_time).alias(TIME), F.lit(1).alias(SIDE), F.lit(0).cast("long").alias(SEQ),
        F.struct(*[F.col(c) for c in kept]).alias(LEFT),
        *[nothing[j].alias(f"{RIGHT}{j}") for j in range(len(rights))],
    ))  # fmt: skip
    # right before left at one instant: a version stamped at the row's time is visible
    order = (
        Window.partitionBy(*keys)
        .orderBy(TIME, SIDE, SEQ)
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    merged = parts[0]
    for part in parts[1:]:
        merged = merged.unionByName(part)
    merged = merged.withColumns(
        {f"{HIT}{j}": F.last(F.col(f"{RIGHT}{j}"), ignorenulls=True).over(order)
         for j in range(len(rights))}
    )  # fmt: skip
    answers: list[Column] = []
    for j in range(len(rights)):
        h = F.col(f"{HIT}{j}")
        ok = _visible(h, within_before)
        # one ``when`` for the version, not one per field: wide datasets plan fast
        answers += [F.when(ok, h).alias(hit(j)), ok.alias(found(j))]
    return merged.where(F.col(SIDE) == 1).select(F.col(f"{LEFT}.*"), *answers)


def asof_lookup(
    left: DataFrame,
    left_on: list[str],
    left_time: Column,
    right: DataFrame,
    ds: spec.DatasetSpec,
    right_on: list[str],
    wanted: list[str],
    within_before: int | None = None,
) -> DataFrame:
    """Every row of ``left`` with ``wanted`` fields of ``ds``'s newest version at or before
    ``left_time`` whose ``right_on`` equal the row's ``left_on`` (nulls where none), and
    ``FOUND``. ``right``: the dataset's rows (and tombstones), e.g. its offline table."""
    versions = Versions(right, ds, right_on, wanted)
    shape = _shape(versions)
    if shape.broadcast:
        answered = _broadcast_lookup(left, left_on, left_time, versions, shape.ties, within_before)
    else:
        answered = asof_hits(left, left_on, left_time, [versions], within_before, [shape.ties])
    return answered.select(
        *left.columns,
        *[F.col(f"{hit(0)}.{w}").alias(w) for w in wanted],
        F.col(found(0)).alias(FOUND),
    )
