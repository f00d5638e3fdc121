"""``MockClient``: commit, log, lookup and query in one process, with the engine's semantics.

Rows logged to a dataset are schema-checked, indexed (keyed datasets) and pushed through
every pipeline that reads the dataset, by the same ``PipelineExecutor`` the streaming engine
runs, with an in-memory hangar (``MemoryState``) instead of RocksDB.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from fennel_dagster.declare import commit_spec
from fennel_dagster.ops import aggregate, index
from fennel_dagster.ops.expr import evaluate
from fennel_dagster.ops.pipeline import PipelineExecutor, RowError
from fennel_dagster.ops.schema import BadRow, check_rows
from fennel_dagster.ops.state import MemoryState
from fennel_dagster.query.execute import QueryExecutor
from fennel_dagster.query.plan import plan_query
from fennel_dagster.wire import spec
from fennel_dagster.wire.usercode import load


class MockError(ValueError):
    """A request the mock client cannot serve (unknown dataset, bad rows, ...)."""


@dataclass
class LogResult:
    accepted: int
    rejected: list[BadRow] = field(default_factory=list)
    errors: list[RowError] = field(default_factory=list)


class MockClient:
    def __init__(self) -> None:
        self.state = MemoryState()
        self.datasets: dict[str, spec.DatasetSpec] = {}
        self.featuresets: dict[str, spec.FeaturesetSpec] = {}
        self._rows: dict[str, list[pd.DataFrame]] = {}
        self._executors: dict[str, list[PipelineExecutor]] = {}
        self._terminal: dict[str, tuple[str, spec.AggregateNode]] = {}
        self.commits: list[spec.CommitSpec] = []

    # ------------------------------------------------------------------ commit

    def commit(
        self,
        message: str,
        datasets: Iterable[Any] = (),
        featuresets: Iterable[Any] = (),
        preview: bool = False,
        incremental: bool = False,
        env: str | None = None,
    ) -> spec.CommitSpec:
        commit = commit_spec(message, datasets, featuresets, env=env, incremental=incremental)
        _validate(commit, self.commits[-1] if self.commits else None)
        if preview:
            return commit
        if not incremental:
            self.datasets, self.featuresets = {}, {}
            self._executors = {}
        for ds in commit.datasets:
            self.datasets[ds.name] = ds
            self._rows.setdefault(ds.name, [])
        for fs in commit.featuresets:
            self.featuresets[fs.name] = fs
        self._executors = {}
        self._terminal = {}
        for ds in self.datasets.values():
            for p in ds.pipelines:
                if env is not None and p.env and env not in p.env:
                    continue
                ex = PipelineExecutor(p, self.datasets)
                for name in p.inputs:
                    self._executors.setdefault(name, []).append(ex)
                last = {n.id: n for n in p.nodes}[p.output]
                if isinstance(last, spec.AggregateNode) and aggregate.is_continuous(last):
                    self._terminal[ds.name] = (f"{ds.name}.{p.name}", last)
        self.commits.append(commit)
        return commit

    # ------------------------------------------------------------------ write path

    def log(self, target: Any, endpoint_or_df: Any, df: pd.DataFrame | None = None) -> LogResult:
        """``log("webhook", "endpoint", df)`` like Fennel, or ``log(Dataset, df)``."""
        if df is None:
            name = getattr(target, "__fennel_dataset_name__", target)
            return self._ingest(self._dataset(name), endpoint_or_df, from_source=True)
        hits = [
            ds for ds in self.datasets.values() for s in ds.sources
            if s.connector.kind == "webhook" and s.connector.name == target
            and dict(s.connector.config).get("endpoint") == endpoint_or_df
        ]  # fmt: skip
        if not hits:
            raise MockError(
                f"no committed dataset has a source Webhook(name={target!r}).endpoint({endpoint_or_df!r})"
            )
        results = [self._ingest(ds, df, from_source=True) for ds in hits]
        return LogResult(sum(r.accepted for r in results), [b for r in results for b in r.rejected])

    def _dataset(self, name: str) -> spec.DatasetSpec:
        ds = self.datasets.get(name)
        if ds is None:
            known = ", ".join(sorted(self.datasets)) or "none"
            raise MockError(f"dataset {name!r} is not committed (committed: {known})")
        return ds

    def _ingest(
        self, ds: spec.DatasetSpec, df: pd.DataFrame, from_source: bool = False
    ) -> LogResult:
        if from_source and ds.pipelines:
            raise MockError(
                f"dataset {ds.name} is produced by a pipeline; log to its inputs instead"
            )
        if from_source:
            df = _apply_source_rules(ds, df)
        good, bad = check_rows(ds, df)
        result = LogResult(len(good), bad)
        if from_source and bad:
            raise MockError(
                f"{len(bad)} row(s) rejected by {ds.name}'s schema; first: {bad[0].reason}"
            )
        if good.empty:
            return result
        self._store(ds, good)
        for ex in self._executors.get(ds.name, []):
            out = ex.run(ds.name, good, self.state)
            self.state.apply(out.writes)
            result.errors.extend(out.errors)
            if not out.rows.empty:
                target = self._dataset(ex.p.dataset)
                down = self._ingest(target, out.rows)
                result.errors.extend(down.errors)
                result.rejected.extend(down.rejected)
        return result

    def _store(self, ds: spec.DatasetSpec, rows: pd.DataFrame) -> None:
        self._rows[ds.name].append(rows)
        if ds.keys:
            from fennel_dagster.ops.state import WriteBatch

            wb = WriteBatch()
            index.upsert(ds, rows, wb)
            self.state.apply(wb)

    # ------------------------------------------------------------------ read path

    def get_dataset_df(self, name: Any) -> pd.DataFrame:
        ds = self._dataset(getattr(name, "__fennel_dataset_name__", name))
        parts = self._rows.get(ds.name) or []
        if not parts:
            return pd.DataFrame({f.name: pd.Series(dtype=object) for f in ds.fields})
        df = pd.concat(parts, ignore_index=True)
        return df.sort_values(ds.timestamp, kind="stable").reset_index(drop=True)

    def lookup(
        self,
        dataset: Any,
        keys: pd.DataFrame,
        timestamps: pd.Series | None = None,
        fields: list[str] | None = None,
    ) -> tuple[pd.DataFrame, pd.Series]:
        name = getattr(dataset, "__fennel_dataset_name__", dataset)
        ts = (
            timestamps
            if timestamps is not None
            else pd.Series([pd.Timestamp.now(tz="UTC")] * len(keys))
        )
        return self._lookup(
            name, pd.Series(ts).reset_index(drop=True), keys.reset_index(drop=True), fields
        )

    def _lookup(
        self, name: str, ts: pd.Series, keys: pd.DataFrame, fields: list[str] | None
    ) -> tuple[pd.DataFrame, pd.Series]:
        ds = self._dataset(name)
        if not ds.keys:
            raise MockError(f"dataset {name} has no keys, so it cannot be looked up")
        if name in self._terminal:
            scope, node = self._terminal[name]
            values, found = aggregate.lookup_aggregate(self.state, scope, node, keys, ts)
            out = keys.reset_index(drop=True).copy()
            for c in values.columns:
                out[c] = values[c]
            out[ds.timestamp] = pd.to_datetime(ts, utc=True).to_numpy()
            wanted = [f.name for f in ds.fields if fields is None or f.name in fields]
            return out[wanted], found
        return index.lookup(self.state, ds, keys, ts, fields)

    def query(
        self,
        inputs: list[Any],
        outputs: list[Any],
        input_df: pd.DataFrame,
        timestamps: pd.Series | None = None,
    ) -> pd.DataFrame:
        ins = [str(i) if not isinstance(i, str) else i for i in inputs]
        outs = [_name(o) for o in outputs]
        plan = plan_query(list(self.featuresets.values()), ins, outs)
        ts = (
            timestamps
            if timestamps is not None
            else pd.Series([pd.Timestamp.now(tz="UTC")] * len(input_df))
        )
        executor = QueryExecutor(list(self.featuresets.values()), self.datasets, self._lookup)
        return executor.run(plan, input_df, ts)

    def query_offline(
        self, inputs: list[Any], outputs: list[Any], input_df: pd.DataFrame, timestamp_column: str
    ) -> pd.DataFrame:
        """Point-in-time: every row's features as of its own timestamp."""
        out = self.query(
            inputs, outputs, input_df.drop(columns=[timestamp_column]), input_df[timestamp_column]
        )
        out[timestamp_column] = pd.to_datetime(input_df[timestamp_column], utc=True).to_numpy()
        return out


def _name(x: Any) -> str:
    if isinstance(x, str):
        return x
    return str(getattr(x, "__fennel_featureset_name__", None) or x)


def _apply_source_rules(ds: spec.DatasetSpec, df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    for src in ds.sources:
        for field_name, value in src.preproc:
            out[field_name] = (
                evaluate(value, out) if not isinstance(value, spec.Lit) else value.value
            )
        if isinstance(src.where, spec.UserCode):
            out = out[load(src.where)(out).astype(bool).to_numpy()]
        elif src.where is not None:
            out = out[evaluate(src.where, out).fillna(False).astype(bool).to_numpy()]
    return out.reset_index(drop=True)


def _validate(commit: spec.CommitSpec, previous: spec.CommitSpec | None) -> None:
    """Run the definition server's validation when it is available in this build."""
    try:
        from fennel_dagster.commit.validate import validate
    except ImportError:
        return
    errors = validate(commit, previous)
    if errors:
        from fennel_dagster.commit.validate import CommitRejected

        raise CommitRejected(errors)


def mock(test: Callable[..., Any]) -> Callable[..., Any]:
    """``@mock`` on a test: passes a fresh ``MockClient`` as its ``client`` argument."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> Any:
        return test(*args, client=MockClient(), **kwargs)

    sig = inspect.signature(test)
    run.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[p for p in sig.parameters.values() if p.name != "client"]
    )
    return run
