"""``query_offline`` on Spark: every output feature as of each input row's own timestamp.

The plan is the online one (``query.plan.plan_query``: which extractors, in which order),
executed on a Spark DataFrame of the input rows:
- alias and expression extractors are native Spark Columns (``batch.expr``);
- lookup extractors are point-in-time lookups (``batch.lookups``): every lookup extractor of
  one dataset keyed by the same features is answered by one as-of pass, reading only the
  offline-table partitions up to the newest input row's date;
- Python extractors run the online executor's code on Arrow chunks, their own lookups
  answered point-in-time as well (``batch.extractors``);
- defaults and found/not-found as online (``query.execute``).

Nothing is collected to the driver but the newest input timestamp and the result of a
small query (``to_pandas`` on the caller's request).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention

from fennel_dagster.batch.asof import FOUND, hit
from fennel_dagster.batch.catalog import OfflineCatalog
from fennel_dagster.batch.expr import spark_type, to_column
from fennel_dagster.batch.extractors import RID, run_python
from fennel_dagster.batch.lookups import Requests, index_lookups, lookup_asof, shares_a_pass
from fennel_dagster.errors import QueryError
from fennel_dagster.query.lookup import aggregate_defaults
from fennel_dagster.query.plan import QueryPlan, plan_query
from fennel_dagster.wire import spec

TIME = "__time"
LPOS = "__lpos"  # an element's place in its row's key list


class OfflineQueryError(QueryError, ValueError):
    """An offline query whose input cannot be read as asked: names the input and the fix."""


@dataclass(frozen=True)
class OfflineQuery:
    """What to compute: ``outputs`` given ``inputs``, each row as of ``timestamp_column``.
    ``feature_to_column_map``: the input column holding a feature (default: its full name)."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    timestamp_column: str
    feature_to_column_map: dict[str, str] = field(default_factory=dict)


def _quoted(name: str) -> Column:
    return F.col(f"`{name.replace('`', '``')}`")


class SparkOfflineQuery:
    def __init__(
        self, spark: Any, catalog: OfflineCatalog, featuresets: Sequence[spec.FeaturesetSpec]
    ) -> None:
        self.spark = spark
        self.catalog = catalog
        self.featuresets = list(featuresets)
        self.features = {f"{fs.name}.{f.name}": f for fs in self.featuresets for f in fs.features}

    def plan(self, q: OfflineQuery) -> QueryPlan:
        return plan_query(self.featuresets, list(q.inputs), list(q.outputs))

    def run(self, q: OfflineQuery, spine: DataFrame) -> DataFrame:
        """The outputs (named by feature) and the timestamp column, in the input's order."""
        qplan = self.plan(q)
        cols = {f: f"__f{i}" for i, f in enumerate([*qplan.inputs, *self._produced(qplan)])}
        frame = self._inputs(q, qplan, spine, cols)
        top = frame.agg(F.max(TIME)).first()  # one small job: partition pruning
        newest = None if top is None else top[0]
        until = None if newest is None else newest.date() + dt.timedelta(days=1)
        done: set[tuple[str, str]] = set()
        known = set(qplan.inputs)
        for ex in qplan.steps:
            if (ex.featureset, ex.name) in done:
                continue
            match ex.kind:
                case "alias":
                    frame = frame.withColumn(cols[self._out(ex)], self._alias(ex, cols))
                case "expr":
                    frame = self._expr(ex, frame, cols)
                case "lookup":
                    frame = self._wave(qplan, frame, cols, until, done, known)
                case "list_lookup":
                    frame = self._list_lookup(ex, frame, cols, until)
                case _:
                    frame = run_python(self.spark, self.catalog, self.featuresets, ex, frame,
                                       cols, TIME, until).localCheckpoint()  # fmt: skip
            done.add((ex.featureset, ex.name))
            known.update(f"{ex.featureset}.{o}" for o in ex.outputs)
        out = frame.orderBy(RID).select(
            *[F.col(cols[o]).alias(o) for o in qplan.outputs],
            F.col(TIME).alias(q.timestamp_column),
        )
        return out

    def _produced(self, qplan: QueryPlan) -> list[str]:
        return [f"{ex.featureset}.{o}" for ex in qplan.steps for o in ex.outputs
                if f"{ex.featureset}.{o}" not in qplan.inputs]  # fmt: skip

    @staticmethod
    def _out(ex: spec.ExtractorSpec) -> str:
        return f"{ex.featureset}.{ex.outputs[0]}"

    def _inputs(
        self, q: OfflineQuery, qplan: QueryPlan, spine: DataFrame, cols: dict[str, str]
    ) -> DataFrame:
        have = spine.columns
        if q.timestamp_column not in have:
            raise OfflineQueryError(
                f"the input has no timestamp column {q.timestamp_column!r} (its columns: "
                f"{', '.join(have)}); pass timestamp_column= naming the column of each row's time"
            )
        picked = []
        for feature in qplan.inputs:
            column = q.feature_to_column_map.get(feature, feature)
            if column not in have:
                raise OfflineQueryError(
                    f"input feature {feature} has no column {column!r} in the input (its "
                    f"columns: {', '.join(have)}); name a column {feature!r}, or map the "
                    "feature to a column with feature_to_column_map"
                )
            dtype = spark_type(self.features[feature].dtype)
            picked.append(_quoted(column).cast(dtype).alias(cols[feature]))
        stamp = _quoted(q.timestamp_column)
        if dict(spine.dtypes)[q.timestamp_column] not in ("timestamp", "timestamp_ntz"):
            stamp = F.to_timestamp(stamp)
        frame = spine.select(*picked, stamp.alias(TIME))
        # row ids fixed once (checkpointed): every later join and pass sees the same ids
        return frame.withColumn(RID, F.monotonically_increasing_id()).localCheckpoint()

    def _list_lookup(
        self, ex: spec.ExtractorSpec, frame: DataFrame, cols: dict[str, str], until: dt.date | None
    ) -> DataFrame:
        """A lookup keyed by list features, as the online executor does it: each element a
        key looked up as of its row's time (one as-of pass over the exploded keys), the
        answers (the default where not found) a list per row in the elements' order."""
        name, field = str(ex.lookup_dataset), str(ex.lookup_field)
        feature = self.features[self._out(ex)]
        listed = feature.dtype.of if isinstance(feature.dtype, spec.OptionalType) else feature.dtype
        assert isinstance(listed, spec.ListType)
        element = spark_type(listed.of)
        ins = [cols[i] for i in ex.inputs]
        keys = [f"__lk{j}" for j in range(len(ins))]
        zipped = F.arrays_zip(*[F.col(c) for c in ins])  # fields named as the columns
        exploded = frame.select(RID, TIME, F.posexplode(zipped).alias(LPOS, "__kv")).select(
            RID,
            LPOS,
            TIME,
            *[F.col("__kv").getField(c).alias(k) for c, k in zip(ins, keys, strict=True)],
        )
        where = f"extractor {ex.featureset}.{ex.name}"
        req = Requests(exploded, (RID, LPOS), tuple(keys), TIME)
        got = lookup_asof(self.spark, self.catalog, name, req, [field], until, where)
        value = self._found_or_filled(name, field, F.when(F.col(FOUND), _quoted(field)))
        default = ex.default if ex.default is not None else feature.default
        if default is not None:
            value = F.coalesce(value.cast(element), F.lit(default).cast(element))
        packed = got.groupBy(RID).agg(
            F.sort_array(
                F.collect_list(F.struct(F.col(LPOS), value.cast(element).alias("v")))
            ).alias("__vs")
        )
        lists = packed.select(RID, F.transform("__vs", lambda s: s.getField("v")).alias("__list"))
        out = cols[self._out(ex)]
        empty = F.array().cast(spark_type(listed))  # a row of no keys: an empty list
        joined = frame.join(lists, RID, "left")
        return joined.withColumn(out, F.coalesce(F.col("__list"), empty)).drop("__list")

    def _found_or_filled(self, dataset: str, field: str, got: Column) -> Column:
        """A looked-up value; for a key without a row, the aggregation's default where the
        field has one (``query.lookup.aggregate_defaults``, as the online lookups answer)."""
        ds = self.catalog.datasets.get(dataset)
        if ds is None and dataset in self.catalog.serving:
            ds = self.catalog.serving[dataset][0].dataset
        fill = aggregate_defaults(ds).get(field) if ds is not None else None
        return got if fill is None else F.coalesce(got, F.lit(fill))

    def _alias(self, ex: spec.ExtractorSpec, cols: dict[str, str]) -> Column:
        """The other feature's values; where missing, the alias's default."""
        value = F.col(cols[ex.inputs[0]])
        if ex.default is None:
            return value
        dtype = spark_type(self.features[self._out(ex)].dtype)
        return F.coalesce(value.cast(dtype), F.lit(ex.default).cast(dtype))

    def _expr(self, ex: spec.ExtractorSpec, frame: DataFrame, cols: dict[str, str]) -> DataFrame:
        assert ex.expr is not None
        local = {i.split(".", 1)[1]: F.col(cols[i]) for i in ex.inputs}
        feature = self.features[self._out(ex)]
        value = to_column(ex.expr).cast(spark_type(feature.dtype))
        if ex.default is not None:
            value = F.coalesce(value, F.lit(ex.default).cast(spark_type(feature.dtype)))
        out = frame.withColumns(local).withColumn(cols[self._out(ex)], value)
        return out.drop(*[c for c in local if c not in frame.columns])

    def _wave(
        self,
        qplan: QueryPlan,
        frame: DataFrame,
        cols: dict[str, str],
        until: dt.date | None,
        done: set[tuple[str, str]],
        known: set[str],
    ) -> DataFrame:
        """Every pending lookup extractor whose inputs are known, at once: one as-of pass per
        key inputs for all the index-served datasets keyed alike by them (one per dataset
        served by an aggregate), on the narrow request rows (row id, keys, time), planned in
        parallel, and all their answers brought to the wide frame by one join on the row id."""
        groups: dict[tuple[str, tuple[str, ...]], list[spec.ExtractorSpec]] = {}
        for s in qplan.steps:
            if (
                s.kind == "lookup"
                and (s.featureset, s.name) not in done
                and all(i in known for i in s.inputs)
            ):
                groups.setdefault((s.lookup_dataset or "", s.inputs), []).append(s)
                done.add((s.featureset, s.name))

        def value(s: spec.ExtractorSpec, got: Column) -> Column:
            feature = self.features[self._out(s)]
            default = s.default if s.default is not None else feature.default
            if default is not None:  # not found: null then the default
                got = F.coalesce(got, F.lit(default))
            return got.cast(spark_type(feature.dtype)).alias(cols[self._out(s)])

        def request(inputs: tuple[str, ...]) -> Requests:
            keys = tuple(dict.fromkeys(cols[i] for i in inputs))
            return Requests(frame.select(RID, *keys, TIME), (RID,),
                            tuple(cols[i] for i in inputs), TIME)  # fmt: skip

        def answer(names: list[str], inputs: tuple[str, ...]) -> DataFrame:
            req = request(inputs)
            if len(names) == 1 and names[0] in self.catalog.serving:
                group = groups[(names[0], inputs)]
                fields = list(dict.fromkeys(s.lookup_field for s in group if s.lookup_field))
                where = f"extractor {group[0].featureset}.{group[0].name}"
                got = lookup_asof(self.spark, self.catalog, names[0], req, fields, until, where)
                # an aggregate answers values even when not found: those are nulled
                return got.select(RID, *[
                    value(s, self._found_or_filled(
                        names[0], s.lookup_field or "",
                        F.when(F.col(FOUND), _quoted(s.lookup_field or ""))))
                    for s in group
                ])  # fmt: skip
            asks = []
            for name in names:
                group = groups[(name, inputs)]
                fields = list(dict.fromkeys(s.lookup_field for s in group if s.lookup_field))
                asks.append((name, fields, f"extractor {group[0].featureset}.{group[0].name}"))
            got = index_lookups(self.spark, self.catalog, asks, req, until)
            return got.select(RID, *[
                value(s, self._found_or_filled(
                    name, s.lookup_field or "", F.col(hit(i)).getField(s.lookup_field or "")))
                for i, name in enumerate(names) for s in groups[(name, inputs)]
            ])  # fmt: skip

        passes: list[tuple[list[str], tuple[str, ...]]] = []
        by_inputs: dict[tuple[str, ...], list[str]] = {}
        for name, inputs in groups:
            by_inputs.setdefault(inputs, []).append(name)
        for inputs, names in by_inputs.items():  # one pass per dataset keyed alike
            passes += [(bundle, inputs) for bundle in shares_a_pass(self.catalog, names)]
        with ThreadPoolExecutor(max_workers=min(4, len(passes))) as pool:  # Spark jobs overlap
            answers = list(pool.map(lambda p: answer(*p), passes))
        for g in groups.values():
            known.update(self._out(s) for s in g)
        if len(answers) == 1:
            return frame.join(answers[0], RID, "left")
        packed = [a.select(RID, F.struct(*[c for c in a.columns if c != RID]).alias(f"__g{k}"))
                  for k, a in enumerate(answers)]  # fmt: skip
        union = packed[0]
        for other in packed[1:]:
            union = union.unionByName(other, allowMissingColumns=True)
        combined = union.groupBy(RID).agg(
            *[F.first(f"__g{k}", ignorenulls=True).alias(f"__g{k}") for k in range(len(packed))]
        )
        expanded = combined.select(
            RID, *[F.col(f"__g{k}.{c}") for k, a in enumerate(answers) for c in a.columns
                   if c != RID],
        )  # fmt: skip
        return frame.join(expanded, RID, "left")


def to_pandas(out: DataFrame) -> Any:
    """A (small) result on the driver, its timestamps UTC-aware as the online path gives them
    (Spark hands session-time-zone wall clocks, and the session's zone is UTC)."""
    import pandas as pd

    frame: Any = out.toPandas()
    for name, kind in out.dtypes:
        if kind == "timestamp":
            frame[name] = pd.to_datetime(frame[name]).dt.tz_localize("UTC")
    return frame
