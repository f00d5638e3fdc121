"""Runs a query plan on a batch: extractors on DataFrames, lookups through a provider."""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any

import numpy as np
import pandas as pd

from fennel_dagster.declare.answers import answer_column, struct_objects
from fennel_dagster.declare.lookup import DatasetHandle, LookupProvider, lookups_served_by
from fennel_dagster.errors import QueryError
from fennel_dagster.ops.columns import positional, utc
from fennel_dagster.ops.expr import astype, evaluate
from fennel_dagster.ops.rows import json_column
from fennel_dagster.query.lookup import aggregate_defaults
from fennel_dagster.query.plan import QueryPlan
from fennel_dagster.wire import spec
from fennel_dagster.wire.usercode import load

LookupKey = tuple[str, tuple[str, ...]]  # (dataset, the inputs that key it)
# (rows, found); rows as a frame, or a column per field (the server's, without the frame)
Fetched = tuple[pd.DataFrame | Mapping[str, pd.Series], pd.Series]
Columns = dict[str, pd.Series]  # the query's columns by full feature name, as they are made


class ExtractorError(QueryError, RuntimeError):
    """An extractor that raised or returned something other than its declared outputs."""


class _FeaturesetHandle:
    """What ``cls`` means inside shipped extractor code: feature names as attributes, and
    the featureset's own methods (``cls.common_names()``), loaded with ``namespace``."""

    def __init__(self, fs: spec.FeaturesetSpec, namespace: Mapping[str, Any]) -> None:
        self.__fennel_featureset_name__ = fs.name
        for f in fs.features:
            setattr(self, f.name, f"{fs.name}.{f.name}")
        for h in fs.helpers:
            fn = load(h.code, namespace)
            setattr(self, h.name, fn if h.kind == "staticmethod" else types.MethodType(fn, self))

    def __getattr__(self, item: str) -> Any:
        raise AttributeError(
            f"featureset {self.__fennel_featureset_name__} has no feature or method {item!r} "
            "its extractors can use: a method must be defined in the featureset's class body "
            "and shippable (its source in a .py file, what it reads imported or literal)"
        )


class QueryExecutor:
    def __init__(
        self,
        featuresets: Sequence[spec.FeaturesetSpec],
        datasets: Mapping[str, spec.DatasetSpec],
        provider: LookupProvider,
        parallel: Executor | None = None,
    ) -> None:
        """``parallel``: lookups of different datasets that need only the query's inputs
        run at once on it (a server's engines answer them concurrently)."""
        self.featuresets = {fs.name: fs for fs in featuresets}
        self.datasets = datasets
        self.provider = provider
        self.parallel = parallel
        self._loaded: dict[tuple[str, str], Callable[..., Any]] = {}
        self._names: dict[str, Any] | None = None

    def _callable(self, ex: spec.ExtractorSpec) -> Callable[..., Any]:
        key = (ex.featureset, ex.name)
        if key not in self._loaded:
            self._loaded[key] = load(ex.code, self._namespace())  # type: ignore[arg-type]
        return self._loaded[key]

    def _answering(
        self, dataset: str, ts: pd.Series, keys: pd.DataFrame, fields: list[str] | None
    ) -> tuple[pd.DataFrame, pd.Series]:
        """An extractor's ``Dataset.lookup``, its struct values objects of their class (as
        Fennel's extractors read them: ``role.cost``), not the dicts rows carry."""
        rows, found = self.provider(dataset, ts, keys, fields)
        ds = self.datasets.get(dataset)
        return (struct_objects(rows, ds.fields) if ds is not None else rows), found

    def _namespace(self) -> dict[str, Any]:
        """The names shipped extractor code sees: datasets and featuresets by name."""
        if self._names is None:
            ns: dict[str, Any] = {
                n: DatasetHandle(n, tuple(f.name for f in d.fields))
                for n, d in self.datasets.items()
            }
            for n, fs in self.featuresets.items():  # a method may name another featureset
                ns[n] = _FeaturesetHandle(fs, ns)
            self._names = ns
        return self._names

    def run(
        self,
        plan: QueryPlan,
        inputs: pd.DataFrame,
        ts: pd.Series,
        fetched: Mapping[LookupKey, Fetched] | None = None,
    ) -> pd.DataFrame:
        """``fetched``: answers to ``prefetches(plan, ...)`` gathered by the caller (a server
        asks its engines without blocking a thread); otherwise the provider answers them."""
        inputs = positional(inputs)
        columns: Columns = {str(c): inputs[c] for c in inputs.columns}
        ts = utc(ts)
        if fetched is None:
            fetched = self._prefetch(plan, columns, ts)
        with lookups_served_by(self._answering):
            for ex in plan.steps:
                produced = self._run_one(ex, columns, len(inputs), ts, fetched)
                for name, col in produced.items():
                    columns[f"{ex.featureset}.{name}"] = col
        return pd.DataFrame({o: columns[o] for o in plan.outputs})

    def run_python(
        self, ex: spec.ExtractorSpec, frame: pd.DataFrame, ts: pd.Series
    ) -> dict[str, pd.Series]:
        """One Python extractor over ``frame`` (its inputs, by full feature name), its lookups
        answered by the provider: how Spark runs it on each chunk of an offline query."""
        columns: Columns = {str(c): frame[c] for c in frame.columns}
        with lookups_served_by(self._answering):
            return self._run_one(ex, columns, len(frame), ts, {})

    def prefetches(self, plan: QueryPlan, inputs: Sequence[str]) -> dict[LookupKey, list[str]]:
        """Lookups keyed by query inputs, one per (dataset, key inputs) with all their
        fields: a featureset of five lookups of one dataset asks it once."""
        return prefetches(plan, inputs)

    def all_prefetched(self, plan: QueryPlan, inputs: Sequence[str]) -> bool:
        """Whether ``prefetches`` holds every lookup of the plan (none keyed by a feature an
        extractor computes first)."""
        return all_prefetched(plan, inputs)

    def lookup_keys(self, key: LookupKey, columns: Mapping[str, pd.Series]) -> pd.DataFrame:
        """The keys frame of a lookup: the dataset's key fields from the inputs that key it."""
        ds = self.datasets[key[0]]
        return pd.DataFrame(
            {k: columns[i].to_numpy() for k, i in zip(ds.keys, key[1], strict=True)}
        )

    def key_records(self, key: LookupKey, columns: Mapping[str, pd.Series]) -> list[dict[str, Any]]:
        """``to_records(lookup_keys(key, columns))``, without the frame."""
        ds = self.datasets[key[0]]
        values = [json_column(columns[i]) for i in key[1]]
        return [dict(zip(ds.keys, row, strict=True)) for row in zip(*values, strict=True)]

    def _prefetch(
        self, plan: QueryPlan, columns: Columns, ts: pd.Series
    ) -> dict[LookupKey, Fetched]:
        groups = self.prefetches(plan, list(columns))

        def fetch(key: LookupKey) -> Fetched:
            return self.provider(key[0], ts, self.lookup_keys(key, columns), groups[key])

        if self.parallel is not None and len(groups) > 1:
            return dict(zip(groups, self.parallel.map(fetch, groups), strict=True))
        return {key: fetch(key) for key in groups}

    def _list_lookup(
        self, ex: spec.ExtractorSpec, columns: Columns, ts: pd.Series, feat: spec.FeatureSpec
    ) -> pd.Series:
        """A lookup keyed by list features: every element a key, looked up at its row's
        time, the answers (the default where one is not found) a list per row in order."""
        ds = self.datasets[str(ex.lookup_dataset)]
        field = str(ex.lookup_field)
        lists = _lists(f"extractor {ex.featureset}.{ex.name}", [columns[i] for i in ex.inputs])
        counts = [len(r) for r in lists[0]]
        keys = pd.DataFrame(
            {k: [x for r in col for x in r] for k, col in zip(ds.keys, lists, strict=True)}
        )
        at = pd.Series(np.repeat(utc(ts).to_numpy(), counts))
        values: list[Any] = []
        if len(keys):
            df, found = self.provider(ds.name, at, keys, [field])
            got = zip(df[field].tolist(), found.tolist(), strict=True)
            fill = None if all(found) else aggregate_defaults(ds).get(field)  # as lookups do
            values = [v if hit else fill for v, hit in got]
        default = ex.default if ex.default is not None else feat.default
        if default is not None:
            values = [default if v is None or v is pd.NA else v for v in values]
        out, start = [], 0
        for n in counts:
            out.append(values[start : start + n])
            start += n
        return answer_column(pd.Series(out, dtype=object), feat.dtype)

    def _run_one(
        self,
        ex: spec.ExtractorSpec,
        columns: Columns,
        rows: int,
        ts: pd.Series,
        fetched: Mapping[LookupKey, Fetched],
    ) -> dict[str, pd.Series]:
        fs = self.featuresets[ex.featureset]
        dtypes = {f.name: f for f in fs.features}
        where = f"extractor {ex.featureset}.{ex.name}"
        if ex.kind == "alias":  # the other feature's values; where missing, the default
            col = columns[ex.inputs[0]]
            if ex.default is not None:
                col = _filled(col, ex.default)
            return {ex.outputs[0]: col}
        if ex.kind == "expr":
            local = pd.DataFrame({i.split(".", 1)[1]: columns[i] for i in ex.inputs})
            out = astype(evaluate(ex.expr, local), dtypes[ex.outputs[0]].dtype)  # type: ignore[arg-type]
            if isinstance(ex.default, list | tuple | dict):
                out = _filled(out, ex.default)
            elif ex.default is not None:
                out = out.fillna(ex.default)
            return {ex.outputs[0]: out}
        if ex.kind == "lookup":
            ds = self.datasets[ex.lookup_dataset]  # type: ignore[index]
            field = str(ex.lookup_field)
            got = fetched.get((ds.name, ex.inputs))
            if got is None:  # keyed by a computed feature: asked when it is known
                keys = self.lookup_keys((ds.name, ex.inputs), columns)
                got = self.provider(ds.name, ts, keys, [field])
            df, found = got
            col = df[field]
            hit = found.to_numpy(dtype=bool)
            fill = None if hit.all() else aggregate_defaults(ds).get(field)
            if fill is not None:  # not found: the aggregation's default, as a lookup of the
                col = col.astype(object).where(hit, fill)  # dataset answers it
            elif not hit.all():  # nulls where not found; an Int64 keeps its type (exact
                # ints: through object and ``infer_objects`` they became floats, 2**53 + 1 lost)
                masked = isinstance(col.dtype, pd.api.extensions.ExtensionDtype)
                col = col.where(hit) if masked else col.astype(object).where(hit, None)
            feat = dtypes[ex.outputs[0]]
            default = ex.default if ex.default is not None else feat.default
            if default is not None:
                col = _filled(col, default)
            if col.dtype == object:
                col = col.infer_objects()
            # as a lookup answers it: nullable dtypes, pd.NA where missing (Fennel's lookups)
            return {ex.outputs[0]: answer_column(astype(positional(col), feat.dtype), feat.dtype)}
        if ex.kind == "list_lookup":
            return {ex.outputs[0]: self._list_lookup(ex, columns, ts, dtypes[ex.outputs[0]])}
        fn = self._callable(ex)
        args = [columns[i] for i in ex.inputs]
        try:
            result = fn(self._namespace()[fs.name], ts, *args)
        except Exception as e:
            raise ExtractorError(  # Fennel's words (fennel_dagster.errors), ours in the hint
                f"Extractor `{ex.name}` in `{fs.name}` failed to run with error: {e}. ",
                hint=f"{where} raised {type(e).__name__}: {e}",
            ) from e
        if isinstance(result, pd.Series):
            result = result.to_frame(
                name=ex.outputs[0] if result.name is None else str(result.name)
            )
        if not isinstance(result, pd.DataFrame):
            raise ExtractorError(
                f"{where} must return a DataFrame with columns {list(ex.outputs)}, got {type(result).__name__}"
            )
        qualified = {f"{fs.name}.{o}": o for o in ex.outputs}  # str(cls.feature) works too
        result = result.rename(columns={c: qualified[c] for c in result.columns if c in qualified})
        missing = [o for o in ex.outputs if o not in result.columns]
        if missing or len(result) != rows:
            raise ExtractorError(
                f"{where} returned {len(result)} rows with columns {list(result.columns)}; "
                f"expected {rows} rows with columns {list(ex.outputs)}"
            )
        return {o: astype(result[o].reset_index(drop=True), dtypes[o].dtype) for o in ex.outputs}


def _filled(col: pd.Series, default: Any) -> pd.Series:
    """``col`` with ``default`` where a value is missing; a list or dict default (an
    embedding's) goes in whole, not spread over the rows as pandas would."""
    if not col.isna().any():
        return col
    if not isinstance(default, list | tuple | dict):
        return col.astype(object).where(col.notna(), default)
    missing = col.isna().tolist()
    values = [default if m else v for v, m in zip(col.tolist(), missing, strict=True)]
    return pd.Series(values, index=col.index, dtype=object, name=col.name)


def _lists(where: str, columns: list[pd.Series]) -> list[list[Any]]:
    """Each row's key lists (None: an empty one), the same length across the inputs."""
    rows = [[[] if v is None or v is pd.NA else list(v) for v in c.tolist()] for c in columns]
    for j, col in enumerate(rows[1:], start=1):
        for i, (a, b) in enumerate(zip(rows[0], col, strict=True)):
            if len(a) != len(b):
                raise ExtractorError(
                    f"{where}: row {i} has {len(a)} keys in its first list input and {len(b)} "
                    f"in input {j + 1}: give every key list of a row the same length"
                )
    return rows


def prefetches(plan: QueryPlan, inputs: Sequence[str]) -> dict[LookupKey, list[str]]:
    """``QueryExecutor.prefetches``."""
    groups: dict[LookupKey, list[str]] = {}
    for ex in plan.steps:
        if _keyed_by_inputs(ex, inputs):
            fields = groups.setdefault((ex.lookup_dataset, ex.inputs), [])  # type: ignore[arg-type]
            if ex.lookup_field not in fields:
                fields.append(ex.lookup_field)  # type: ignore[arg-type]
    return groups


def all_prefetched(plan: QueryPlan, inputs: Sequence[str]) -> bool:
    """``QueryExecutor.all_prefetched``."""
    return all(_keyed_by_inputs(ex, inputs) for ex in plan.steps if ex.kind == "lookup")


def _keyed_by_inputs(ex: spec.ExtractorSpec, inputs: Sequence[str]) -> bool:
    return ex.kind == "lookup" and all(i in inputs for i in ex.inputs)
