"""Python extractors on Spark, with their dataset lookups answered point-in-time at scale.

An extractor's code calls ``Dataset.lookup(ts, key=...)`` with keys it computes itself, so
the keys are known only by running it. Each chunk of rows (``CHUNK_ROWS``, a group of
``applyInPandas``) runs the extractor through the online executor's own code
(``QueryExecutor.run_python``) with a provider that *replays* answers: the n-th lookup call
of the chunk gets the answer recorded for call n if its dataset, keys and times are the ones
asked before; otherwise the call is recorded as a request and answered "not found" for now.
A chunk with unanswered requests emits the requests instead of results; Spark answers all
of them in one as-of pass per dataset (``batch.lookups``), and only those chunks run again.
A chain of lookups (keys taken from an earlier lookup's answer) settles in one pass per link;
code whose requests never settle is not deterministic and is refused after ``MAX_PASSES``.

Everything stays in Spark: no chunk, request or answer passes through the driver.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention
from pyspark.sql import types as T  # noqa: N812

from fennel_dagster.batch.asof import FOUND
from fennel_dagster.batch.catalog import OfflineCatalog
from fennel_dagster.batch.expr import spark_type
from fennel_dagster.batch.lookups import Requests, lookup_asof
from fennel_dagster.ops.keys import micros
from fennel_dagster.ops.rows import dumps, from_records, to_records
from fennel_dagster.query.execute import ExtractorError, QueryExecutor
from fennel_dagster.wire import spec

CHUNK_ROWS = 10_000
MAX_PASSES = 8
RID, CHUNK, KIND, CALL, POS, SIG, DS, QTS = (
    "__rid", "__chunk", "__kind", "__call", "__pos", "__sig", "__ds", "__qts",
)  # fmt: skip
RESULT, REQUEST = 0, 1


@dataclass(frozen=True)
class _Dep:
    """A dataset the extractor may look up, and its columns in requests and answers."""

    index: int
    ds: spec.DatasetSpec

    def key(self, j: int) -> str:
        return f"__q{self.index}_{j}"

    def field(self, j: int) -> str:
        return f"__a{self.index}_{j}"


def _sig(name: str, keys: pd.DataFrame, ts: pd.Series) -> int:
    """Which call this is: a replayed answer is used only for the same dataset, keys, times."""
    h = hashlib.sha1(name.encode())
    h.update(dumps({"k": to_records(keys), "t": [micros(t) for t in ts]}))
    return int(h.hexdigest()[:15], 16)


class _Replay:
    """The lookup provider of one chunk's run: recorded answers, or a new request."""

    def __init__(self, deps: Mapping[str, _Dep], answers: pd.DataFrame) -> None:
        self.deps = deps
        self.answers = {int(c): g.sort_values(POS) for c, g in answers.groupby(CALL)}
        self.calls = 0
        self.pending: list[tuple[int, _Dep, pd.DataFrame, pd.Series, int]] = []

    def __call__(
        self, name: str, ts: pd.Series, keys: pd.DataFrame, fields: list[str] | None
    ) -> tuple[pd.DataFrame, pd.Series]:
        call = self.calls
        self.calls += 1
        dep = self.deps.get(name)
        if dep is None:
            raise ExtractorError(
                f"looked up dataset {name}, which is not among its deps "
                f"({', '.join(self.deps) or 'none'}); add it to @extractor(deps=[...])"
            )
        ds = dep.ds
        keys = keys[list(ds.keys)].reset_index(drop=True)
        ts = pd.to_datetime(pd.Series(ts), utc=True).reset_index(drop=True)
        wanted = [f for f in ds.fields if fields is None or f.name in fields]
        sig = _sig(name, keys, ts)
        got = self.answers.get(call)
        if got is not None and str(got[DS].iloc[0]) == name and int(got[SIG].iloc[0]) == sig:
            found = got[FOUND].fillna(False).astype(bool).reset_index(drop=True)
            values = got[[dep.field(j) for j in range(len(ds.fields))]]
            values.columns = [f.name for f in ds.fields]
            recs = to_records(values.reset_index(drop=True), [f.name for f in wanted])
            recs = [r if hit else {} for r, hit in zip(recs, found.tolist(), strict=True)]
            return from_records(recs, wanted), found
        self.pending.append((call, dep, keys, ts, sig))
        return from_records([{}] * len(keys), wanted), pd.Series(False, index=keys.index)


def run_python(
    spark: Any,
    catalog: OfflineCatalog,
    featuresets: Sequence[spec.FeaturesetSpec],
    ex: spec.ExtractorSpec,
    frame: DataFrame,
    columns: Mapping[str, str],
    time: str,
    until: dt.date | None,
) -> DataFrame:
    """``frame`` (with ``RID``, ``time`` and the extractor's inputs, named by ``columns``:
    feature -> column) with the extractor's outputs added, each named by ``columns``."""
    fs = next(f for f in featuresets if f.name == ex.featureset)
    out_features = [next(f for f in fs.features if f.name == o) for o in ex.outputs]
    out_cols = [columns[f"{fs.name}.{o}"] for o in ex.outputs]
    names = list(ex.deps) or sorted(n for n, d in catalog.datasets.items() if d.keys)
    deps = {n: _Dep(i, catalog.datasets[n]) for i, n in enumerate(names) if n in catalog.datasets}
    where = f"extractor {ex.featureset}.{ex.name}"

    key_fields = [
        T.StructField(d.key(j), spark_type(f.dtype))
        for d in deps.values() for j, f in enumerate(_key_fields(d.ds))
    ]  # fmt: skip
    out_schema = T.StructType([
        T.StructField(KIND, T.IntegerType()), T.StructField(CHUNK, T.LongType()),
        T.StructField(RID, T.LongType()),
        *[T.StructField(c, spark_type(f.dtype)) for c, f in zip(out_cols, out_features, strict=True)],
        T.StructField(CALL, T.IntegerType()), T.StructField(POS, T.IntegerType()),
        T.StructField(SIG, T.LongType()), T.StructField(DS, T.StringType()),
        T.StructField(QTS, T.TimestampType()), *key_fields,
    ])  # fmt: skip
    answer_schema = T.StructType([
        T.StructField(CHUNK, T.LongType()), T.StructField(CALL, T.IntegerType()),
        T.StructField(POS, T.IntegerType()), T.StructField(SIG, T.LongType()),
        T.StructField(DS, T.StringType()), T.StructField(FOUND, T.BooleanType()),
        *[T.StructField(d.field(j), spark_type(f.dtype))
          for d in deps.values() for j, f in enumerate(d.ds.fields)],
    ])  # fmt: skip
    datasets = dict(catalog.datasets)
    fs_specs = list(featuresets)
    ins = {i: columns[i] for i in ex.inputs}

    def run_chunk(left: pd.DataFrame, right: pd.DataFrame) -> pd.DataFrame:
        if left.empty:
            return pd.DataFrame({f.name: pd.Series(dtype=object) for f in out_schema.fields})
        left = left.sort_values(RID).reset_index(drop=True)
        replay = _Replay(deps, right)
        executor = QueryExecutor(fs_specs, datasets, replay)
        frame_in = pd.DataFrame({i: left[c] for i, c in ins.items()})
        ts = pd.to_datetime(left[time], utc=True)
        try:
            produced: dict[str, pd.Series] | None = executor.run_python(ex, frame_in, ts)
        except ExtractorError:
            if not replay.pending:
                raise
            produced = None  # it failed on answers it does not have yet
        chunk = int(left[CHUNK].iloc[0])
        if replay.pending:
            return _requests(replay.pending, chunk, out_schema)
        assert produced is not None
        out: dict[str, Any] = {KIND: RESULT, CHUNK: chunk, RID: left[RID]}
        for o, c in zip(ex.outputs, out_cols, strict=True):
            s = produced[o].reset_index(drop=True)
            out[c] = s.astype(object).where(s.notna(), None)
        return _frame(out, out_schema, len(left))

    todo = frame.select(RID, time, *dict.fromkeys(ins.values())).withColumn(
        CHUNK, F.floor(F.col(RID) / CHUNK_ROWS).cast("long")
    )
    answers = spark.createDataFrame([], answer_schema)
    results: list[DataFrame] = []
    for _ in range(MAX_PASSES):
        out = (
            todo.groupBy(CHUNK)
            .cogroup(answers.groupBy(CHUNK))
            .applyInPandas(run_chunk, out_schema)
            .localCheckpoint()
        )  # fmt: skip  (a checkpoint, not a cache: each pass's plan starts afresh)
        results.append(out.where(F.col(KIND) == RESULT).select(RID, *out_cols))
        asked = out.where(F.col(KIND) == REQUEST)
        if asked.limit(1).count() == 0:
            break
        todo = todo.join(asked.select(CHUNK).distinct(), CHUNK, "left_semi")
        fresh = _answer(spark, catalog, deps, asked, answer_schema, until, where)
        stale = asked.select(CHUNK, CALL).distinct()
        answers = (
            answers.join(stale, [CHUNK, CALL], "left_anti")
            .join(asked.select(CHUNK).distinct(), CHUNK, "left_semi")
            .unionByName(fresh).localCheckpoint()
        )  # fmt: skip
    else:
        raise ExtractorError(
            f"{where}: its lookups did not settle after {MAX_PASSES} passes (each pass asked "
            "for other keys than the last): its code must give the same lookups for the same "
            "inputs and answers"
        )
    done = results[0]
    for r in results[1:]:
        done = done.unionByName(r)
    return frame.join(done, RID, "left")


def _key_fields(ds: spec.DatasetSpec) -> list[spec.FieldSpec]:
    by_name = {f.name: f for f in ds.fields}
    return [by_name[k] for k in ds.keys]


def _requests(
    pending: list[tuple[int, _Dep, pd.DataFrame, pd.Series, int]], chunk: int, schema: T.StructType
) -> pd.DataFrame:
    parts = []
    for call, dep, keys, ts, sig in pending:
        n = len(keys)
        part: dict[str, Any] = {
            KIND: [REQUEST] * n, CHUNK: [chunk] * n, CALL: [call] * n, POS: list(range(n)),
            SIG: [sig] * n, DS: [dep.ds.name] * n, QTS: ts.to_numpy(),
        }  # fmt: skip
        for j, k in enumerate(dep.ds.keys):
            s = keys[k]
            part[dep.key(j)] = s.astype(object).where(s.notna(), None)
        parts.append(_frame(part, schema, n))
    return pd.concat(parts, ignore_index=True)


def _frame(columns: Mapping[str, Any], schema: T.StructType, n: int) -> pd.DataFrame:
    """The columns of ``schema`` in order; absent ones all null (as objects: Arrow takes a
    column of None as any type, a column of NaN only as a float)."""
    return pd.DataFrame({
        f.name: columns[f.name] if f.name in columns else pd.Series([None] * n, dtype=object)
        for f in schema.fields
    })  # fmt: skip


def _answer(
    spark: Any,
    catalog: OfflineCatalog,
    deps: Mapping[str, _Dep],
    asked: DataFrame,
    schema: T.StructType,
    until: dt.date | None,
    where: str,
) -> DataFrame:
    """Every request answered: one as-of pass per dataset asked."""
    out = spark.createDataFrame([], schema)
    names = {r[0] for r in asked.select(DS).distinct().collect()}  # a few dataset names
    for name, dep in deps.items():
        if name not in names:
            continue
        ds = dep.ds
        mine = asked.where(F.col(DS) == name).select(
            CHUNK, CALL, POS, SIG, DS, QTS, *[dep.key(j) for j in range(len(ds.keys))]
        )
        req = Requests(mine, (CHUNK, CALL, POS), tuple(dep.key(j) for j in range(len(ds.keys))),
                       QTS)  # fmt: skip
        got = lookup_asof(spark, catalog, name, req, [f.name for f in ds.fields], until, where)
        out = out.unionByName(got.select(
            CHUNK, CALL, POS, SIG, DS, F.col(FOUND),
            *[F.col(f.name).alias(dep.field(j)) for j, f in enumerate(ds.fields)],
            *[F.lit(None).cast(f.dataType).alias(f.name) for f in schema.fields
              if f.name.startswith("__a") and not f.name.startswith(f"__a{dep.index}_")],
        ))  # fmt: skip
    return out
