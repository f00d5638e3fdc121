"""Point-in-time lookups of a dataset on Spark, for many (keys, time) requests at once: what
``Dataset.lookup`` answers online, answered from history.

Two ways, as online (``query.lookup.lookup_state``):
- a dataset served by its version index: one sort-merge as-of pass of the requests with the
  dataset's offline table (``batch.asof``), newest version at or before each request's time;
- a dataset served by a terminal continuous aggregate (a 7-day sum decays between events):
  its pipeline runs on Spark up to the aggregate's input, the events and the requests meet
  per key partition (events first, in time order), the engine's aggregate records the events
  into an in-memory state and answers each request with ``lookup_state``, the same function
  the engine's lookup endpoint and the mock call.

Only offline-table partitions before ``until`` (the day after the newest request) are read.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention
from pyspark.sql import types as T  # noqa: N812

from fennel_dagster.batch.asof import FOUND, Versions, asof_hits, asof_lookup
from fennel_dagster.batch.catalog import OfflineCatalog
from fennel_dagster.batch.expr import spark_type
from fennel_dagster.batch.pipeline import SparkPipeline, spark_schema
from fennel_dagster.ops.expr import astype
from fennel_dagster.ops.index import DELETED
from fennel_dagster.ops.pipeline import BatchResult, PipelineExecutor
from fennel_dagster.ops.state import MemoryState, WriteBatch
from fennel_dagster.query.lookup import LookupFailed, lookup_state
from fennel_dagster.wire import spec

SIDE = "__side"


@dataclass(frozen=True)
class Requests:
    """Lookup requests as a DataFrame: ``ids`` identify a row (the answer is joined back on
    them), ``keys`` hold the dataset's key values in its key order, ``time`` is when."""

    frame: DataFrame
    ids: tuple[str, ...]
    keys: tuple[str, ...]
    time: str


def _looked_up(catalog: OfflineCatalog, name: str, needed_by: str) -> spec.DatasetSpec:
    ds = catalog.datasets.get(name)
    if ds is None:
        raise LookupFailed(f"{needed_by} looks up {name}, which is not on this branch")
    if not ds.keys:
        raise LookupFailed(
            f"{needed_by}: dataset {name} has no key fields, so it cannot be looked up; "
            "declare its key with field(key=True)"
        )
    return ds


def lookup_asof(
    spark: Any,
    catalog: OfflineCatalog,
    name: str,
    req: Requests,
    fields: list[str],
    until: dt.date | None,
    needed_by: str,
) -> DataFrame:
    """``req.frame`` with ``fields`` of dataset ``name`` as of each row's time, and FOUND."""
    ds = _looked_up(catalog, name, needed_by)
    if name in catalog.serving:
        return _aggregate_asof(spark, catalog, name, req, fields, until, needed_by)
    right = catalog.read(spark, name, needed_by, until)
    return asof_lookup(req.frame, list(req.keys), F.col(req.time), right, ds, list(ds.keys), fields)


def shares_a_pass(catalog: OfflineCatalog, names: list[str]) -> list[list[str]]:
    """``names`` grouped into the datasets one as-of pass answers together: those served by
    their version index (not an aggregate) with the same key types, in order."""
    bundles: dict[tuple[Any, ...], list[str]] = {}
    for name in names:
        ds = catalog.datasets.get(name)
        if ds is None or not ds.keys or name in catalog.serving:
            bundles[("alone", name)] = [name]
            continue
        types = {f.name: spark_type(f.dtype) for f in ds.fields}
        bundles.setdefault(tuple(types[k].simpleString() for k in ds.keys), []).append(name)
    return list(bundles.values())


def index_lookups(
    spark: Any,
    catalog: OfflineCatalog,
    asks: list[tuple[str, list[str], str]],
    req: Requests,
    until: dt.date | None,
) -> DataFrame:
    """``req.frame`` with, per ``(dataset, fields, needed_by)`` of ``asks`` (index-served,
    keyed alike: ``shares_a_pass``), ``hit(i)`` and ``found(i)``, from one as-of pass."""
    found = [_looked_up(catalog, name, needed_by) for name, _, needed_by in asks]
    with ThreadPoolExecutor(max_workers=min(4, len(asks))) as pool:  # Delta logs, in parallel
        tables = list(pool.map(lambda a: catalog.read(spark, a[0], a[2], until), asks))
    rights = [
        Versions(right, ds, list(ds.keys), fields)
        for right, ds, (_, fields, _) in zip(tables, found, asks, strict=True)
    ]
    return asof_hits(req.frame, list(req.keys), F.col(req.time), rights)


def _aggregate_asof(
    spark: Any,
    catalog: OfflineCatalog,
    name: str,
    req: Requests,
    fields: list[str],
    until: dt.date | None,
    needed_by: str,
) -> DataFrame:
    job, serves = catalog.serving[name]
    node, ds = serves.node, job.dataset
    datasets = {s.dataset.name: s.dataset for s in (*job.inputs, *job.lookups)}
    pipe = SparkPipeline(job.pipeline, datasets)
    inputs = {n: catalog.read(spark, n, needed_by, until) for n in datasets}
    events = pipe.frame(node.input, inputs)
    fields_in = pipe.schemas[node.input]
    ts = next(f.name for f in fields_in if f.timestamp)
    id_types = {f.name: f.dataType for f in req.frame.schema.fields if f.name in req.ids}
    types = {f.name: spark_type(f.dtype) for f in fields_in}
    col_of = dict(zip(ds.keys, req.keys, strict=True))  # the aggregate's keys are ds's keys
    union = events.select(
        *[F.col(f.name) for f in fields_in],
        *[F.lit(None).cast(id_types[i]).alias(i) for i in req.ids], F.lit(0).alias(SIDE),
    ).unionByName(req.frame.select(
        *[(F.col(col_of[f.name]).cast(types[f.name]) if f.name in col_of else F.col(req.time).cast(types[f.name]) if f.name == ts
           else F.lit(None).cast(types[f.name])).alias(f.name) for f in fields_in],
        *[F.col(i) for i in req.ids], F.lit(1).alias(SIDE),
    ))  # fmt: skip
    ordered = union.repartition(*node.keys).sortWithinPartitions(SIDE, ts)
    wanted = [f for f in ds.fields if f.name in fields]
    out_schema = T.StructType(
        [T.StructField(i, id_types[i]) for i in req.ids]
        + list(spark_schema(wanted).fields)
        + [T.StructField(FOUND, T.BooleanType())]
    )
    executor = PipelineExecutor(job.pipeline, {**datasets, ds.name: ds})  # ds: its output types
    key_types = {f.name: f.dtype for f in ds.fields}
    ids = list(req.ids)

    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        state = MemoryState()
        for pdf in batches:
            side = pdf[SIDE].to_numpy()
            ev = pdf[side == 0]
            if len(ev):
                typed = pd.DataFrame({f.name: astype(ev[f.name], f.dtype) for f in fields_in})
                if DELETED in ev.columns:
                    typed[DELETED] = ev[DELETED].astype("boolean").fillna(False).astype(bool)
                wb = WriteBatch()
                executor.apply_node(node, typed, ts, state, wb, BatchResult(pd.DataFrame(), wb))
                state.apply(wb)
            q = pdf[side == 1].reset_index(drop=True)
            if len(q):
                keys = pd.DataFrame({
                    k: astype(q[k], key_types[k]) for k in ds.keys
                })  # fmt: skip
                got, found = lookup_state(state, ds, serves, keys, q[ts], fields)
                frame = q[ids].copy()
                for f in wanted:
                    frame[f.name] = got[f.name].astype(object).where(got[f.name].notna(), None)
                frame[FOUND] = found.to_numpy()
                yield frame

    answers = ordered.mapInPandas(run, out_schema)
    return req.frame.join(answers, on=ids, how="left").withColumn(
        FOUND, F.coalesce(F.col(FOUND), F.lit(False))
    )
