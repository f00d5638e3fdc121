"""Runs a query plan on a batch: extractors on DataFrames, lookups through a provider."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any

import pandas as pd

from fennel_dagster.declare.lookup import DatasetHandle, LookupProvider, lookups_served_by
from fennel_dagster.errors import QueryError
from fennel_dagster.ops.expr import astype, evaluate
from fennel_dagster.query.plan import QueryPlan
from fennel_dagster.wire import spec
from fennel_dagster.wire.usercode import load


class ExtractorError(QueryError, RuntimeError):
    """An extractor that raised or returned something other than its declared outputs."""


class _FeaturesetHandle:
    """What ``cls`` means inside shipped extractor code: feature names as attributes."""

    def __init__(self, fs: spec.FeaturesetSpec) -> None:
        self.__fennel_featureset_name__ = fs.name
        for f in fs.features:
            setattr(self, f.name, f"{fs.name}.{f.name}")


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

    def _callable(self, ex: spec.ExtractorSpec) -> Callable[..., Any]:
        key = (ex.featureset, ex.name)
        if key not in self._loaded:
            ns: dict[str, Any] = {
                n: DatasetHandle(n, tuple(f.name for f in d.fields))
                for n, d in self.datasets.items()
            }
            ns.update({n: _FeaturesetHandle(fs) for n, fs in self.featuresets.items()})
            self._loaded[key] = load(ex.code, ns)  # type: ignore[arg-type]
        return self._loaded[key]

    def run(self, plan: QueryPlan, inputs: pd.DataFrame, ts: pd.Series) -> pd.DataFrame:
        frame = inputs.reset_index(drop=True).copy()
        ts = pd.to_datetime(ts, utc=True).reset_index(drop=True)
        fetched = self._prefetch(plan, frame, ts)
        with lookups_served_by(self.provider):
            for ex in plan.steps:
                produced = self._run_one(ex, frame, ts, fetched)
                for name, col in produced.items():
                    frame[f"{ex.featureset}.{name}"] = col
        return frame[list(plan.outputs)]

    def run_python(
        self, ex: spec.ExtractorSpec, frame: pd.DataFrame, ts: pd.Series
    ) -> dict[str, pd.Series]:
        """One Python extractor over ``frame`` (its inputs, by full feature name), its lookups
        answered by the provider: how Spark runs it on each chunk of an offline query."""
        with lookups_served_by(self.provider):
            return self._run_one(ex, frame, ts, {})

    def _prefetch(
        self, plan: QueryPlan, frame: pd.DataFrame, ts: pd.Series
    ) -> dict[tuple[str, tuple[str, ...]], tuple[pd.DataFrame, pd.Series]]:
        """Lookup extractors whose keys are query inputs, one call per (dataset, key inputs)
        with all their fields: a featureset of five lookups of one dataset asks it once."""
        groups: dict[tuple[str, tuple[str, ...]], list[str]] = {}
        for ex in plan.steps:
            if ex.kind == "lookup" and all(i in frame.columns for i in ex.inputs):
                fields = groups.setdefault((ex.lookup_dataset, ex.inputs), [])  # type: ignore[arg-type]
                if ex.lookup_field not in fields:
                    fields.append(ex.lookup_field)  # type: ignore[arg-type]

        def fetch(key: tuple[str, tuple[str, ...]]) -> tuple[pd.DataFrame, pd.Series]:
            ds = self.datasets[key[0]]
            keys = pd.DataFrame(
                {k: frame[i].to_numpy() for k, i in zip(ds.keys, key[1], strict=True)}
            )
            return self.provider(ds.name, ts, keys, groups[key])

        if self.parallel is not None and len(groups) > 1:
            return dict(zip(groups, self.parallel.map(fetch, groups), strict=True))
        return {key: fetch(key) for key in groups}

    def _run_one(
        self,
        ex: spec.ExtractorSpec,
        frame: pd.DataFrame,
        ts: pd.Series,
        fetched: Mapping[tuple[str, tuple[str, ...]], tuple[pd.DataFrame, pd.Series]],
    ) -> dict[str, pd.Series]:
        fs = self.featuresets[ex.featureset]
        dtypes = {f.name: f for f in fs.features}
        where = f"extractor {ex.featureset}.{ex.name}"
        if ex.kind == "alias":
            return {ex.outputs[0]: frame[ex.inputs[0]]}
        if ex.kind == "expr":
            local = pd.DataFrame({i.split(".", 1)[1]: frame[i] for i in ex.inputs})
            out = astype(evaluate(ex.expr, local), dtypes[ex.outputs[0]].dtype)  # type: ignore[arg-type]
            if ex.default is not None:
                out = out.fillna(ex.default)
            return {ex.outputs[0]: out}
        if ex.kind == "lookup":
            ds = self.datasets[ex.lookup_dataset]  # type: ignore[index]
            got = fetched.get((ds.name, ex.inputs))
            if got is None:  # keyed by a computed feature: asked when it is known
                keys = pd.DataFrame(
                    {k: frame[i].to_numpy() for k, i in zip(ds.keys, ex.inputs, strict=True)}
                )
                got = self.provider(ds.name, ts, keys, [ex.lookup_field])  # type: ignore[list-item]
            df, found = got
            col = df[ex.lookup_field].astype(object).where(found.to_numpy(), None)
            feat = dtypes[ex.outputs[0]]
            default = ex.default if ex.default is not None else feat.default
            if default is not None:
                col = col.where(col.notna(), default)
            return {ex.outputs[0]: astype(col.infer_objects(), feat.dtype)}
        fn = self._callable(ex)
        args = [frame[i] for i in ex.inputs]
        try:
            result = fn(_FeaturesetHandle(fs), ts, *args)
        except Exception as e:
            raise ExtractorError(f"{where} raised {type(e).__name__}: {e}") from e
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
        if missing or len(result) != len(frame):
            raise ExtractorError(
                f"{where} returned {len(result)} rows with columns {list(result.columns)}; "
                f"expected {len(frame)} rows with columns {list(ex.outputs)}"
            )
        return {o: astype(result[o].reset_index(drop=True), dtypes[o].dtype) for o in ex.outputs}
