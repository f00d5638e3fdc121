"""``MockClient``: commit, log, lookup and query in one process, with the engine's semantics.

Rows logged to a dataset are schema-checked, indexed (keyed datasets) and pushed through
every pipeline that reads the dataset, by the same ``PipelineExecutor`` the streaming engine
runs, with an in-memory hangar (``MemoryState``) instead of RocksDB.
"""

from __future__ import annotations

import copy
import functools
import heapq
import inspect
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

import pandas as pd

from fennel_dagster.api import (
    BranchName,
    DatasetRef,
    Done,
    FeatureRef,
    LogResult,
    Unsupported,
    answer_shape,
    check_input_columns,
    dataset_name,
    feature_name,
    input_frame,
    now_for,
    refuse_feature_log,
)
from fennel_dagster.commit.compiler import dataset_hashes, terminal_aggregate
from fennel_dagster.commit.environment import select_env
from fennel_dagster.commit.errors import (
    MAIN_BRANCH,
    CommitRejected,
    branch_exists,
    branch_not_synced,
    clone_source_missing,
    deleted_branch_missing,
    main_branch_deletion,
    raise_for_backfill,
)
from fennel_dagster.commit.graph import EntityGraph
from fennel_dagster.commit.server import merge_incremental
from fennel_dagster.commit.validate import validate
from fennel_dagster.declare import commit_spec
from fennel_dagster.declare.answers import struct_objects
from fennel_dagster.declare.lookup import serve_outside_runs
from fennel_dagster.errors import ClientError
from fennel_dagster.mock.fennel_words import rejection_text
from fennel_dagster.ops import index
from fennel_dagster.ops.pipeline import PipelineExecutor
from fennel_dagster.ops.rows import loads, to_records, typed_series
from fennel_dagster.ops.schema import BadRow, check_rows
from fennel_dagster.ops.source_rules import (
    event_time_problem,
    in_time_range,
    ints_as_text,
    preprocess,
    text_fields,
    where_mask,
)
from fennel_dagster.ops.state import MemoryState, WriteBatch
from fennel_dagster.query.execute import QueryExecutor
from fennel_dagster.query.lookup import dataset_not_found, lookup_state, not_found_as_null
from fennel_dagster.query.plan import plan_query
from fennel_dagster.wire import plan, spec


class MockError(ClientError, ValueError):
    """A request the mock client cannot serve (unknown dataset, bad rows, ...)."""


_BRANCH_STATE = ("state", "datasets", "featuresets", "_rows", "_executors", "_serving", "commits",
                 "_erased")  # fmt: skip


_NO_OFFLINE_REQUESTS = (
    "the MockClient answers query_offline at once and keeps no requests to track or cancel"
)


class MockClient:
    def __init__(self, strict: bool = True) -> None:
        """``strict`` (Fennel's behaviour): a row a pipeline cannot produce (an assign whose
        function returns the wrong type, an overflowing sum) makes ``log`` raise, after the
        good rows are applied; ``strict=False`` returns them in ``LogResult.errors``, as the
        engine writes them to the dataset's error topic."""
        self.strict = strict
        self.branch = MAIN_BRANCH
        self._branches: dict[str, dict[str, Any]] = {}
        self._absent: str | None = None  # a branch checked out that does not exist
        self._fresh()

    @property
    def branch(self) -> BranchName:
        """The checked-out branch: ``client.branch``, or ``client.branch()`` as in Fennel."""
        return self._branch

    @branch.setter
    def branch(self, name: str) -> None:
        self._branch = BranchName(name)

    def _fresh(self) -> None:
        self.state = MemoryState()
        self.datasets: dict[str, spec.DatasetSpec] = {}
        self.featuresets: dict[str, spec.FeaturesetSpec] = {}
        self._rows: dict[str, list[pd.DataFrame]] = {}
        self._executors: dict[str, list[PipelineExecutor]] = {}
        self._serving: dict[str, plan.AggregateServing] = {}
        self.commits: list[spec.CommitSpec] = []
        self._erased: dict[str, set[tuple[Any, ...]]] = {}  # dataset -> erased erase-key values

    # ------------------------------------------------------------------ branches
    # Fennel's: each branch has its own definitions and data; init and clone check the new
    # branch out; a clone copies both

    def _park(self) -> None:
        if self._absent is None:
            self._branches[self.branch] = {a: getattr(self, a) for a in _BRANCH_STATE}

    def _enter(self, name: str) -> None:
        """Check out a parked branch's state (the current one parked first)."""
        self._park()
        self.branch = name
        self._absent = None
        for a, v in self._branches[name].items():
            setattr(self, a, v)

    def _existing(self) -> None:
        """Requests need a branch that exists: ``checkout`` of a missing one only names it,
        as Fennel's clients (and ours over HTTP) do, and the next request says so."""
        if self._absent is not None:
            raise branch_not_synced(self._absent, self.list_branches())

    def list_branches(self) -> list[str]:
        self._park()
        return list(self._branches)

    def init_branch(self, name: str) -> Done:
        if name in self.list_branches():
            raise branch_exists(name)
        self.branch = name
        self._absent = None
        self._fresh()
        self._park()
        return Done(f"created branch {name!r}")

    def clone_branch(
        self, name: str, from_branch: str | None = None, from_name: str | None = None
    ) -> Done:
        """Clone ``from_branch`` (Fennel's client's name; its reference page says
        ``from_name``, also taken) into ``name``, and check it out."""
        source = from_branch or from_name or self.branch
        known = self.list_branches()
        if name in known:
            raise branch_exists(name, cloning=True)
        if source not in known:
            raise clone_source_missing(source, known)
        copied = copy.deepcopy(self._branches[source])
        self.branch = name
        self._absent = None
        for a, v in copied.items():
            setattr(self, a, v)
        self._park()
        return Done(f"cloned branch {source!r} into {name!r}")

    def checkout(self, name: str, init: bool = False) -> Done:
        known = self.list_branches()
        if name not in known:
            if init:
                return self.init_branch(name)
            self.branch = name  # named, not created: the next request says it does not exist
            self._absent = name
            self._fresh()
            return Done(f"checked out branch {name!r}, which does not exist yet")
        self._enter(name)
        return Done(f"checked out branch {name!r}")

    def delete_branch(self, name: str) -> Done:
        known = self.list_branches()
        if name not in known:
            raise deleted_branch_missing(name, known)
        if name == MAIN_BRANCH:
            raise main_branch_deletion()
        del self._branches[name]
        if self.branch == name:
            self._absent = name  # not parked again
            self._enter(MAIN_BRANCH)
        return Done(f"deleted branch {name!r}")

    # ------------------------------------------------------------------ Fennel's test hooks

    def sleep(self, seconds: float | None = None, timeout: float | None = None) -> None:
        """Fennel's wait for a server to catch up: the mock is caught up when ``log`` returns."""

    def integration_mode(self) -> str:
        return "mock"

    def is_integration_client(self) -> bool:
        """False: Fennel code branches on it to expect the mock's answers."""
        return False

    # ------------------------------------------------------------------ commit

    def commit(
        self,
        message: str,
        datasets: Iterable[type] = (),
        featuresets: Iterable[type] = (),
        preview: bool = False,
        incremental: bool = False,
        env: str | None = None,
        backfill: bool = True,
    ) -> Done:
        """Validate and apply a commit; a new pipeline processes every row its inputs have
        received so far (as the engine processes its inputs' retained history). The answer
        carries what was committed (``.commit``; with ``preview``, what would be)."""
        self._existing()
        commit = select_env(
            commit_spec(message, datasets, featuresets, env=env, incremental=incremental)
        )
        _validate(commit, self.commits[-1] if self.commits else None)
        if not backfill:
            raise_for_backfill(self._new_pipelines(commit))
        if preview:
            return Done(f"preview of {message!r}: valid", commit)
        if not incremental:
            self.datasets, self.featuresets = {}, {}
        for ds in commit.datasets:
            self.datasets[ds.name] = ds
            self._rows.setdefault(ds.name, [])
        for fs in commit.featuresets:
            self.featuresets[fs.name] = fs
        before = {ex.scope for exs in self._executors.values() for ex in exs}
        self._executors = {}
        self._serving = {}
        new: list[PipelineExecutor] = []
        for ds in self.datasets.values():
            for p in ds.pipelines:
                ex = PipelineExecutor(p, self.datasets)
                for name in p.inputs:
                    self._executors.setdefault(name, []).append(ex)
                if ex.scope not in before:
                    new.append(ex)
            serving = terminal_aggregate(ds)
            if serving is not None:
                self._serving[ds.name] = serving
        # the branch's graph, as the platform keeps it: an incremental commit merged in
        previous = self.commits[-1] if self.commits else None
        self.commits.append(merge_incremental(commit, previous) if incremental else commit)
        depth = self._depths()  # a pipeline back-fills after those whose output it reads
        for ex in sorted(new, key=lambda ex: depth[ex.p.dataset]):
            self._backfill(ex)
        serve_outside_runs(self._dataset_lookup)  # Fennel's tests call Dataset.lookup directly
        for cls in datasets:  # and log(Dataset, df) through the client that committed it
            cls.__fennel_mock_client__ = self  # type: ignore[attr-defined]
        return Done(f"committed {message!r}", commit)

    def _new_pipelines(self, commit: spec.CommitSpec) -> list[str]:
        """Pipelines of ``commit`` with no isomorphic committed version (what back-fills)."""
        merged = {**(self.datasets if commit.incremental else {})}
        merged.update({d.name: d for d in commit.datasets})
        before = dataset_hashes(
            EntityGraph.build(replace(commit, datasets=tuple(self.datasets.values())))
        )
        after = dataset_hashes(EntityGraph.build(replace(commit, datasets=tuple(merged.values()))))
        return [f"{n}.{p.name}" for n, ds in merged.items() for p in ds.pipelines
                if before.get(n) != after[n]]  # fmt: skip

    def _backfill(self, ex: PipelineExecutor) -> None:
        """Rows logged before ``ex`` existed, through ``ex``, in event-time order."""
        for name in ex.p.inputs:
            ds = self.datasets.get(name)
            parts = self._rows.get(name) or []
            if ds is None or not parts:
                continue
            rows = pd.concat(parts, ignore_index=True)
            rows = rows.sort_values(ds.timestamp, kind="stable").reset_index(drop=True)
            self._flow([(ex, name, rows)], LogResult(0))

    # ------------------------------------------------------------------ write path

    def log(
        self,
        webhook: DatasetRef,
        endpoint: str | pd.DataFrame,
        df: pd.DataFrame | None = None,
        batch_size: int = 1000,
    ) -> LogResult:
        """``log("webhook", "endpoint", df)`` like Fennel (its keyword names too), or
        ``log(Dataset, df)``. ``batch_size`` rows at a time reach the pipelines, as the
        platform's clients send them (Fennel's default: 1000)."""
        self._existing()
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise MockError(f"log(batch_size={batch_size!r}): give a whole number of rows >= 1")
        if df is None:
            if not isinstance(endpoint, pd.DataFrame):
                raise MockError(
                    f"log({webhook!r}, {endpoint!r}) has no rows: pass a DataFrame, as "
                    "log(Dataset, df) or log('webhook', 'endpoint', df)"
                )
            return self._checked(
                self._ingest(self._dataset(dataset_name(webhook)), endpoint, from_source=True)
            )
        # A webhook is the namespace's, not a branch's: its rows reach the datasets of every
        # branch that sources from it, as the engine's source jobs all read its inbox topic.
        here = self.branch if self._absent is None else None
        results: list[LogResult] = []
        try:
            names = [b for b in self.list_branches() if b != here]
            for name in names + ([here] if here is not None else []):
                self._enter(name)
                for start in range(0, max(len(df), 1), batch_size):
                    part = df.iloc[start : start + batch_size].reset_index(drop=True)
                    results += self._log_here(str(webhook), endpoint, part)
        finally:
            if here is not None:
                self._enter(here)
        if not results:
            raise MockError(
                f"no committed dataset has a source Webhook(name={webhook!r}).endpoint({endpoint!r})"
            )
        return self._checked(LogResult(sum(r.accepted for r in results),
                                       [b for r in results for b in r.rejected],
                                       [e for r in results for e in r.errors]))  # fmt: skip

    def _log_here(self, webhook: str, endpoint: str, df: pd.DataFrame) -> list[LogResult]:
        """Rows logged to a webhook endpoint, into the checked-out branch's datasets."""
        hits = [
            (ds, s) for ds in self.datasets.values() for s in ds.sources
            if s.connector.kind == "webhook" and s.connector.name == webhook
            and dict(s.connector.config).get("endpoint") == endpoint
        ]  # fmt: skip
        return [self._ingest(ds, df, from_source=True, sources=[src]) for ds, src in hits]

    def _checked(self, result: LogResult) -> LogResult:
        if self.strict and result.errors:
            first = result.errors[0]
            raise MockError(
                f"{len(result.errors)} row(s) could not go through the pipelines (the good rows "
                f"were applied); first: {first.reason}. MockClient(strict=False) returns them "
                "in LogResult.errors instead, as the engine's error topic holds them"
            )
        return result

    def _dataset(self, name: str) -> spec.DatasetSpec:
        ds = self.datasets.get(name)
        if ds is None:
            raise dataset_not_found(name, list(self.datasets))
        return ds

    def _ingest(
        self,
        ds: spec.DatasetSpec,
        df: pd.DataFrame,
        from_source: bool = False,
        sources: Sequence[spec.SourceSpec] | None = None,
    ) -> LogResult:
        result, stored = self._accept(ds, df, from_source, sources)
        if not stored.empty:
            self._flow([(ex, ds.name, stored) for ex in self._executors.get(ds.name, [])], result)
        return result

    def _accept(
        self,
        ds: spec.DatasetSpec,
        df: pd.DataFrame,
        from_source: bool = False,
        sources: Sequence[spec.SourceSpec] | None = None,
    ) -> tuple[LogResult, pd.DataFrame]:
        """Check ``df``'s rows against ``ds`` and store the good ones: what was done, and the
        rows stored (for the pipelines downstream)."""
        if from_source and ds.pipelines:
            raise MockError(
                f"dataset {ds.name} is produced by a pipeline; log to its inputs instead"
            )
        if from_source:
            df = _apply_source_rules(ds.sources if sources is None else sources, df)
            df = ints_as_text(df, text_fields(ds))
        good, bad = check_rows(ds, df)
        if from_source and not good.empty:
            good = _in_time_range(ds, ds.sources if sources is None else sources, good)
        if from_source and not good.empty:
            good, late = _event_time_bounds(ds, ds.sources if sources is None else sources, good)
            bad += late
        result = LogResult(len(good), bad)
        if from_source and bad:
            ours = f"{len(bad)} row(s) rejected by {ds.name}'s schema; first: {bad[0].reason}"
            fennel = rejection_text(ds, df)  # Fennel's words first (fennel_dagster.errors)
            raise MockError(ours) if fennel is None else MockError(fennel, hint=ours)
        good = self._without_erased(ds, good)
        if not good.empty:
            self._store(ds, good)
        return result, good

    def _flow(
        self, tasks: list[tuple[PipelineExecutor, str, pd.DataFrame]], result: LogResult
    ) -> None:
        """Run each ``(pipeline, input, rows)`` and the pipelines downstream of what they emit,
        in dependency order: a pipeline runs once every dataset it reads (its inputs and its
        joins' right sides, transitively) has taken in what this write makes of it. So a
        pipeline's keyed output that another pipeline of the same input joins is up to date
        when the join reads it (as Fennel answers: its mock joins over all rows), whatever
        the order of the datasets in the commit."""
        depth = self._depths()
        queue: list[tuple[int, int, PipelineExecutor, str, pd.DataFrame]] = []
        order = itertools.count()
        for ex, name, rows in tasks:
            heapq.heappush(queue, (depth[ex.p.dataset], next(order), ex, name, rows))
        while queue:  # a task only adds deeper ones: each depth is done before the next
            _, _, ex, name, rows = heapq.heappop(queue)
            out = ex.run(name, rows, self.state)
            self.state.apply(out.writes)
            result.errors.extend(out.errors)
            if out.rows.empty:
                continue
            ds = self._dataset(ex.p.dataset)
            down, stored = self._accept(ds, out.rows)
            result.errors.extend(down.errors)
            result.rejected.extend(down.rejected)
            for nxt in self._executors.get(ds.name, []) if not stored.empty else []:
                heapq.heappush(queue, (depth[nxt.p.dataset], next(order), nxt, ds.name, stored))

    def _depths(self) -> dict[str, int]:
        """Per dataset: 0 if no pipeline writes it, else one more than the deepest dataset its
        pipelines read (inputs and join right sides)."""
        depths: dict[str, int] = {}

        def depth(name: str) -> int:
            if name not in depths:
                ds = self.datasets.get(name)
                reads = [i for p in ds.pipelines for i in p.inputs] if ds is not None else []
                depths[name] = 1 + max((depth(i) for i in reads), default=-1)
            return depths[name]

        for name in self.datasets:
            depth(name)
        return depths

    def _store(self, ds: spec.DatasetSpec, rows: pd.DataFrame) -> None:
        self._rows[ds.name].append(rows)
        if ds.keys:
            wb = WriteBatch()
            index.upsert(ds, rows, wb)
            self.state.apply(wb)

    # ------------------------------------------------------------------ erase

    def erase(self, dataset_name: DatasetRef, erase_keys: pd.DataFrame) -> Done:
        """Fennel's ``erase``: hard-erase the rows of ``dataset`` whose erase-key fields
        (``field(key=True, erase_key=True)``) hold one of the rows of ``erase_keys``. They go
        from the dataset's rows and index now, and rows with those keys logged later are
        dropped on arrival, so they reach neither lookups nor downstream pipelines. Rows that
        already went downstream stay there: erase those datasets too (as in Fennel). A
        continuous-window aggregate answers its lookups from aggregation state: its erased
        keys are found no more, now and after later events."""
        self._existing()
        ds = self._dataset(_name_of(dataset_name))
        where = f"erase({ds.name})"
        if not isinstance(erase_keys, pd.DataFrame):
            raise MockError(f"{where}: erase_keys must be a DataFrame of erase-key columns")
        if not ds.erase_keys:
            raise MockError(
                f"{where}: the dataset has no erase keys; mark its key fields with "
                "field(key=True, erase_key=True) and commit it"
            )
        given = [str(c) for c in erase_keys.columns]
        names = {f.name for f in ds.fields}
        for c in given:
            if c not in names:
                raise MockError(f"{where}: {c!r} is not a field of {ds.name}")
            if c not in ds.keys:
                raise MockError(f"{where}: {c!r} is not a key field of {ds.name}")
            if c not in ds.erase_keys:
                raise MockError(
                    f"{where}: {c!r} is not an erase key of {ds.name} (its erase keys: "
                    f"{', '.join(ds.erase_keys)}); declare field(key=True, erase_key=True)"
                )
        if sorted(given) != sorted(ds.erase_keys):
            missing = ", ".join(k for k in ds.erase_keys if k not in given)
            raise MockError(f"{where}: give every erase key of {ds.name}; missing {missing}")
        typed = erase_keys.reset_index(drop=True)
        dtypes = {f.name: f.dtype for f in ds.fields}
        for c in ds.erase_keys:
            try:
                typed[c] = typed_series(typed[c].tolist(), dtypes[c])
            except (TypeError, ValueError) as e:
                raise MockError(f"{where}: the values of {c!r} do not fit its type: {e}") from e
        erased = self._erased.setdefault(ds.name, set())
        erased.update(tuple(r[k] for k in ds.erase_keys) for r in to_records(typed))
        parts = [self._without_erased(ds, part) for part in self._rows.get(ds.name, [])]
        self._rows[ds.name] = [part for part in parts if not part.empty]
        if ds.keys:
            ns = index.namespace(ds.name)
            wb = WriteBatch()
            for key, value in self.state.scan(ns, b""):
                rec = loads(value)
                if tuple(rec.get(k) for k in ds.erase_keys) in erased:
                    wb.delete(ns, key)
            self.state.apply(wb)
        return Done(f"erased {len(typed)} key(s) of {ds.name}")

    def _without_erased(self, ds: spec.DatasetSpec, rows: pd.DataFrame) -> pd.DataFrame:
        erased = self._erased.get(ds.name)
        if not erased or rows.empty:
            return rows
        keep = [
            tuple(r[k] for k in ds.erase_keys) not in erased
            for r in to_records(rows, list(ds.erase_keys))
        ]
        return rows if all(keep) else rows[keep].reset_index(drop=True)

    # ------------------------------------------------------------------ read path

    def get_datasets(self) -> list[spec.DatasetSpec]:
        """The checked-out branch's committed datasets (their definitions), in commit order."""
        self._existing()
        return list(self.datasets.values())

    def get_featuresets(self) -> list[spec.FeaturesetSpec]:
        """The checked-out branch's committed featuresets (their definitions)."""
        self._existing()
        return list(self.featuresets.values())

    def inspect(self, dataset: DatasetRef, n: int = 10) -> pd.DataFrame:
        """Fennel's look at a dataset's rows: at most ``n`` of them, the newest (Fennel's
        mock samples ``n`` at random; the newest are what a reader checks first)."""
        if n < 1:
            raise MockError(f"inspect({dataset_name(dataset)}, n={n}): n must be at least 1")
        df = self.get_dataset_df(dataset)
        return df if len(df) <= n else df.iloc[len(df) - n :].reset_index(drop=True)

    def get_dataset_df(self, dataset_name: DatasetRef) -> pd.DataFrame:
        """Every row of a dataset, ordered by its timestamp."""
        self._existing()
        ds = self._dataset(_name_of(dataset_name))
        parts = self._rows.get(ds.name) or []
        if not parts:
            return pd.DataFrame({f.name: pd.Series(dtype=object) for f in ds.fields})
        df = pd.concat(parts, ignore_index=True)
        return df.sort_values(ds.timestamp, kind="stable").reset_index(drop=True)

    def lookup(
        self,
        dataset: DatasetRef,
        keys: pd.DataFrame,
        timestamps: pd.Series | None = None,
        fields: list[str] | None = None,
    ) -> tuple[pd.DataFrame | pd.Series, pd.Series]:
        """The dataset's rows for ``keys`` as of ``timestamps`` (default now), and whether
        each key was found; one field asked, its column alone, as Fennel answers."""
        self._existing()
        keys = keys.reset_index(drop=True)
        name = dataset_name(dataset)
        data, found = self._lookup(name, now_for(keys, timestamps), keys, fields)
        types = {f.name: f.dtype for f in self._dataset(name).fields}
        return answer_shape(data, found, fields, types)

    def _lookup(
        self, name: str, ts: pd.Series, keys: pd.DataFrame, fields: list[str] | None
    ) -> tuple[pd.DataFrame, pd.Series]:
        ds = self._dataset(name)
        rows, found = lookup_state(self.state, ds, self._serving.get(name), keys, ts, fields)
        erased = self._erased.get(ds.name)
        if erased and name in self._serving and len(keys):
            asked = keys.reset_index(drop=True)
            typed = {f.name: f.dtype for f in ds.fields}
            frame = pd.DataFrame(
                {k: typed_series(asked[k].tolist(), typed[k]) for k in ds.erase_keys}
            )
            gone = pd.Series(
                [tuple(r[k] for k in ds.erase_keys) in erased for r in to_records(frame)]
            )
            if gone.any():
                found = found & ~gone.to_numpy()
                rows = not_found_as_null(rows, found, ds)
        return rows, found

    def _dataset_lookup(
        self, name: str, ts: pd.Series, keys: pd.DataFrame, fields: list[str] | None
    ) -> tuple[pd.DataFrame, pd.Series]:
        """``Dataset.lookup`` called outside an extractor: struct values as objects, as the
        extractors' lookups answer them (``query.execute``)."""
        rows, found = self._lookup(name, ts, keys, fields)
        return struct_objects(rows, self._dataset(name).fields), found

    def query(
        self,
        inputs: list[FeatureRef],
        outputs: list[FeatureRef],
        input_df: pd.DataFrame | None = None,
        timestamps: pd.Series | None = None,
        *,
        input_dataframe: pd.DataFrame | None = None,
        log: bool = False,
        workflow: str | None = None,
        sampling_rate: float | None = None,
    ) -> pd.DataFrame:
        """Fennel's ``query(inputs, outputs, input_dataframe=...)``."""
        self._existing()
        refuse_feature_log(log, workflow, sampling_rate)
        input_df = input_frame(input_df, input_dataframe)
        ins = [feature_name(i) for i in inputs]
        check_input_columns(ins, input_df.columns)
        qplan = plan_query(list(self.featuresets.values()), ins, [feature_name(o) for o in outputs])
        executor = QueryExecutor(list(self.featuresets.values()), self.datasets, self._lookup)
        return executor.run(qplan, input_df, now_for(input_df, timestamps))

    def track_offline_query(self, request_id: object) -> Unsupported:
        """Fennel's mock answers 404: the mock's ``query_offline`` returns its rows at once,
        so there is no request to follow (``Client.track_offline_query`` follows one)."""
        return Unsupported(f"offline query {request_id}: {_NO_OFFLINE_REQUESTS}")

    def cancel_offline_query(self, request_id: object) -> Unsupported:
        return Unsupported(f"offline query {request_id}: {_NO_OFFLINE_REQUESTS}")

    def query_offline(
        self,
        inputs: list[Any],
        outputs: list[Any],
        timestamp_column: str | pd.DataFrame | None = None,
        input_dataframe: pd.DataFrame | str | None = None,
        input_s3: str | None = None,
        output_s3: str | None = None,
        feature_to_column_map: dict[str, str] | None = None,
        workflow: str | None = None,  # Fennel's label for its logs: accepted, not recorded
        *,
        format: str = "pandas",  # noqa: A002 - Fennel's name
    ) -> pd.DataFrame:
        """Point-in-time: every row's features as of its own timestamp. Takes Fennel's
        ``(inputs, outputs, timestamp_column, input_dataframe=df, feature_to_column_map=...)``
        and this mock's former ``(inputs, outputs, df, timestamp_column)`` alike."""
        self._existing()
        input_df: pd.DataFrame | None = None
        if isinstance(timestamp_column, pd.DataFrame):  # the former order: the rows third
            input_df, timestamp_column = (
                timestamp_column,
                input_dataframe if isinstance(input_dataframe, str) else None,
            )
            input_dataframe = None
        elif isinstance(input_dataframe, str):
            raise MockError("query_offline: input_dataframe must be a DataFrame, not a str")
        if input_s3 is not None or output_s3 is not None or format != "pandas":
            raise MockError(
                "input must contain a key 'input_dataframe' with the input dataframe (Fennel's "
                "words): the MockClient reads and writes no S3, so pass "
                "input_dataframe=<DataFrame> and format='pandas' (a platform client runs "
                "input_s3/output_s3 on Spark)"
            )
        if not isinstance(timestamp_column, str):
            raise MockError("query_offline needs timestamp_column=<the column of each row's time>")
        df = input_frame(input_df, input_dataframe)
        if timestamp_column not in df.columns:
            raise MockError(
                f"the input has no timestamp column {timestamp_column!r} (its columns: "
                f"{', '.join(map(str, df.columns))}); pass timestamp_column= naming it"
            )
        df = df.rename(columns={c: f for f, c in (feature_to_column_map or {}).items()})
        out = self.query(inputs, outputs, df.drop(columns=[timestamp_column]), df[timestamp_column])
        out[timestamp_column] = pd.to_datetime(df[timestamp_column], utc=True).to_numpy()
        return out


def _name_of(dataset: DatasetRef) -> str:
    return dataset_name(dataset)


def _apply_source_rules(sources: Sequence[spec.SourceSpec], df: pd.DataFrame) -> pd.DataFrame:
    out = df
    for src in sources:
        out = preprocess(src, out)
        out = out[where_mask(src, out).to_numpy()]
    return out.reset_index(drop=True)


def _in_time_range(
    ds: spec.DatasetSpec, sources: Sequence[spec.SourceSpec], rows: pd.DataFrame
) -> pd.DataFrame:
    """The rows inside a source's ``since``/``until`` (as the engine's source job drops the
    others: quietly, not as error rows)."""
    if not any(s.since is not None or s.until is not None for s in sources):
        return rows
    stamps = pd.to_datetime(rows[ds.timestamp], utc=True)
    keep = [all(in_time_range(s, ts.value) for s in sources) for ts in stamps]
    return rows[keep].reset_index(drop=True)


def _event_time_bounds(
    ds: spec.DatasetSpec, sources: Sequence[spec.SourceSpec], rows: pd.DataFrame
) -> tuple[pd.DataFrame, list[BadRow]]:
    """The source's event-time bounds, with now as every row's arrival (the engine uses the
    Kafka message's timestamp)."""
    now = pd.Timestamp.now(tz="UTC").value
    reasons = [
        next((r for src in sources if (r := event_time_problem(src, ds.name, ds.timestamp,
                                                                 ts.value, now))), None)
        for ts in rows[ds.timestamp]
    ]  # fmt: skip
    keep = [r is None for r in reasons]
    bad = [BadRow(ds.name, r, rec) for r, rec in zip(reasons, to_records(rows), strict=True) if r]
    return rows[keep].reset_index(drop=True), bad


def _validate(commit: spec.CommitSpec, previous: spec.CommitSpec | None) -> None:
    """The definition server's rules, less the platform's connector rules (no connector is
    read here: rows are logged to the mock directly)."""
    errors = validate(commit, previous)
    if errors:
        raise CommitRejected(errors)


class InternalTestClient:
    """Fennel's test client that renders commits as Fennel's protobuf sync requests (for
    tests of Fennel's own wire format). fennel_dagster has no such format: it refuses, by
    name, rather than answer with something else; ``MockClient().commit(..., preview=True)``
    validates and renders a commit here."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise ClientError(
            "InternalTestClient renders Fennel's protobuf sync requests, a wire format "
            "fennel_dagster does not have: check a commit with "
            "MockClient().commit(message, datasets=..., preview=True) instead"
        )


def almost_equal(a: float, b: float, epsilon: float = 1e-6) -> bool:
    """Fennel's test helper: ``a`` and ``b`` within ``epsilon`` (two NaNs are equal)."""
    if math.isnan(a) and math.isnan(b):
        return True
    return abs(a - b) < epsilon


def log(dataset: type, df: pd.DataFrame) -> LogResult:
    """Fennel's ``fennel.testing.log``: rows straight into a committed dataset, through the
    mock client that committed it — also into a dataset a pipeline derives (a test fixture)."""
    client: MockClient | None = getattr(dataset, "__fennel_mock_client__", None)
    name = dataset_name(dataset)
    if client is None:
        raise MockError(f"dataset {name} is not committed to a MockClient: commit it first")
    ds = client._dataset(name)
    if ds.pipelines:
        return client._checked(client._ingest(ds, df))
    return client.log(dataset, df)


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
