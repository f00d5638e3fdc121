"""Running queries for the server: cached physical plans, executed off the event loop.

A plan whose extractors are all native (alias, expression, dataset lookup) runs on a thread
of this process; a plan with Python extractors runs in an executor process, so user code
that is slow or holds the GIL never stalls the event loop or the other requests. Both use
the one ``QueryExecutor`` and engine lookups batched per partition (``EngineLookups``).
Executor processes keep each branch's graph by commit id, read once from Postgres.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
import pandas as pd
from prometheus_client import Histogram

from fennel_dagster.commit import branches
from fennel_dagster.declare.dtypes import struct_fields
from fennel_dagster.declare.lookup import LookupProvider
from fennel_dagster.engine.lookup_client import EngineLookups, Routes, Want, as_columns
from fennel_dagster.engine.lookup_pool import LookupPool
from fennel_dagster.heap import freeze_startup_heap
from fennel_dagster.metadata import registry
from fennel_dagster.metadata.db import connect
from fennel_dagster.metadata.registry import JobRow
from fennel_dagster.ops.columns import positional, utc
from fennel_dagster.ops.keys import micros_of
from fennel_dagster.query.execute import Fetched, LookupKey, QueryExecutor
from fennel_dagster.query.gather import GatherPlan, Unfit, gather_plan
from fennel_dagster.query.plan import QueryPlan, plan_query
from fennel_dagster.serve import frames
from fennel_dagster.serve.state import BranchGraph
from fennel_dagster.settings import Settings
from fennel_dagster.wire import spec

STEP_SECONDS = Histogram(
    "fennel_query_plan_seconds", "Time to execute a query plan, by where it ran", ["runs_in"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5),
)  # fmt: skip
IN_LOOP_ROWS = 16  # a native plan this small runs on the event loop (a thread hop costs more)
FANOUT = Histogram(
    "fennel_query_lookup_fanout", "Engine lookup requests made by one query",
    buckets=(0, 1, 2, 4, 8, 16, 32, 64),
)  # fmt: skip


@dataclass(frozen=True)
class Step:
    """One step of a physical plan, as ``explain`` shows it."""

    extractor: str
    kind: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    lookups: tuple[str, ...]  # datasets it looks up
    runs_in: str  # "server" | "executor process"


def needs_process(plan: QueryPlan) -> bool:
    return any(ex.kind == "python" for ex in plan.steps)


def explain(plan: QueryPlan) -> list[Step]:
    where = "executor process" if needs_process(plan) else "server"
    out = []
    for ex in plan.steps:
        looked = (ex.lookup_dataset,) if ex.lookup_dataset else tuple(ex.deps)
        outputs = tuple(f"{ex.featureset}.{o}" for o in ex.outputs)
        out.append(Step(f"{ex.featureset}.{ex.name}", ex.kind, ex.inputs, outputs, looked, where))
    return out


class QueryRunner:
    def __init__(self, settings: Settings, processes: int = 2, threads: int = 16) -> None:
        self.settings = settings
        self.workers = processes
        self.threads = ThreadPoolExecutor(threads, thread_name_prefix="query")
        self.fanout = ThreadPoolExecutor(threads, thread_name_prefix="lookup-fanout")
        # datasets looked up at once; a pool of its own, as each waits on the fan-out pool
        self.datasets = ThreadPoolExecutor(threads, thread_name_prefix="lookup-datasets")
        self.http = httpx.Client(limits=httpx.Limits(max_keepalive_connections=64))
        self.processes = ProcessPoolExecutor(
            processes, mp_context=mp.get_context("spawn"),
            initializer=_init_worker, initargs=(settings.model_dump_json(),),
        )  # fmt: skip
        self._plans: dict[tuple[int | None, str, tuple[str, ...], tuple[str, ...]], QueryPlan] = {}
        self._gathers: dict[tuple[int | None, str, tuple[str, ...], tuple[str, ...]],
                            GatherPlan | None] = {}  # fmt: skip
        self._pool: tuple[asyncio.AbstractEventLoop, LookupPool] | None = None

    def warm(self) -> None:
        """Start the executor processes now rather than on the first Python extractor."""
        list(self.processes.map(_ping, range(self.workers)))

    def close(self) -> None:
        self.processes.shutdown(cancel_futures=True)
        self.threads.shutdown(cancel_futures=True)
        self.fanout.shutdown(cancel_futures=True)
        self.datasets.shutdown(cancel_futures=True)
        self.http.close()

    def plan(self, graph: BranchGraph, inputs: Sequence[str], outputs: Sequence[str]) -> QueryPlan:
        key = (graph.head, graph.name, tuple(inputs), tuple(outputs))
        found = self._plans.get(key)
        if found is None:
            found = plan_query(list(graph.featuresets.values()), inputs, outputs)
            if len(self._plans) > 10_000:
                self._plans.clear()
            self._plans[key] = found
        return found

    def pool(self) -> LookupPool:
        """The event loop's kept-alive connections to engines (made in the loop that uses
        them: a connection belongs to one loop)."""
        loop = asyncio.get_running_loop()
        if self._pool is None or self._pool[0] is not loop:
            self._pool = (loop, LookupPool())
        return self._pool[1]

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool[1].aclose()

    def gather_plan(self, graph: BranchGraph, plan: QueryPlan) -> GatherPlan | None:
        key = (graph.head, graph.name, plan.inputs, plan.outputs)
        if key not in self._gathers:
            if len(self._gathers) > 10_000:
                self._gathers.clear()
            self._gathers[key] = gather_plan(plan, graph.featuresets, graph.datasets)
        return self._gathers[key]

    async def run_json(
        self,
        graph: BranchGraph,
        plan: QueryPlan,
        data: dict[str, list[Any]],
        stamps: Any,
        types: Mapping[str, spec.DType],
        routes: Routes,
        secret: str,
        what: str = "data",
    ) -> dict[str, list[Any]]:
        """The plan's outputs as JSON columns for the inputs' JSON ``data`` and the
        request's ``stamps`` (None: now). A plan of lookups and aliases runs on the JSON
        values themselves (``query.gather``); any other, on frames (``run``)."""
        gather = self.gather_plan(graph, plan)
        if gather is not None:
            columns = frames.json_inputs(data, types, gather.inputs, what)
            n = len(next(iter(columns.values()), ()))
            micros = frames.timestamp_micros(stamps, n, "timestamps")
            start = time.perf_counter()
            keys = list(gather.lookups)
            via = EngineLookups(routes, secret, pool=self.pool())
            wants = [
                Want(graph.serving_job(k[0]), gather.key_records(k, columns), micros,
                     gather.lookups[k])
                for k in keys
            ]  # fmt: skip
            answers = await via.lookup_many_records(wants)
            try:
                out = gather.run(columns, dict(zip(keys, answers, strict=True)))
            except Unfit:  # a value outside its rules: the executor decides, on these answers
                fetched = {
                    k: as_columns(w, *a) for k, w, a in zip(keys, wants, answers, strict=True)
                }
                df = frames.frame(data, types, what)
                ts = frames.timestamps(stamps, len(df), "timestamps")
                result = await self.run(graph, plan, df, ts, routes, secret, fetched)
                return frames.to_json_columns(result)
            STEP_SECONDS.labels("server").observe(time.perf_counter() - start)
            FANOUT.observe(via.calls)
            return out
        df = frames.frame(data, types, what)
        ts = frames.timestamps(stamps, len(df), "timestamps")
        return frames.to_json_columns(await self.run(graph, plan, df, ts, routes, secret))

    async def run(
        self,
        graph: BranchGraph,
        plan: QueryPlan,
        frame: pd.DataFrame,
        ts: pd.Series,
        routes: Routes,
        secret: str,
        fetched: Mapping[LookupKey, Fetched] | None = None,
    ) -> pd.DataFrame:
        """``plan`` over ``frame``; ``fetched``: its lookups' answers, when the caller has
        them already (a native plan of prefetched lookups only)."""
        loop = asyncio.get_running_loop()
        start = time.perf_counter()
        if needs_process(plan):
            own = _routes_for(graph, routes)
            result, calls = await loop.run_in_executor(
                self.processes, _run_in_worker, graph.name, graph.head, plan, frame, ts, own, secret
            )
            where = "executor process"
        else:
            via = EngineLookups(routes, secret, self.http, self.fanout, pool=self.pool())
            executor = QueryExecutor(
                list(graph.featuresets.values()), graph.datasets, _provider(graph, via), self.datasets
            )  # fmt: skip
            frame, ts = positional(frame), utc(ts)
            if executor.all_prefetched(plan, list(frame.columns)):
                if fetched is None:
                    # engines asked from the loop, concurrently; no thread waits on them
                    # (each engine gets all of the query's lookups it serves in one request)
                    groups = executor.prefetches(plan, list(frame.columns))
                    stamps = micros_of(ts)
                    answers = await via.lookup_many_async([
                        Want(graph.serving_job(key[0]), executor.key_records(key, frame),
                             stamps, fields)
                        for key, fields in groups.items()
                    ])  # fmt: skip
                    fetched = dict(zip(groups, answers, strict=True))
                if len(frame) <= IN_LOOP_ROWS:
                    result = executor.run(plan, frame, ts, fetched)
                else:
                    result = await loop.run_in_executor(
                        self.threads, executor.run, plan, frame, ts, fetched
                    )
            else:  # a lookup keyed by a computed feature: asked mid-plan, from a thread
                result = await loop.run_in_executor(self.threads, executor.run, plan, frame, ts)
            calls, where = via.calls, "server"
        STEP_SECONDS.labels(where).observe(time.perf_counter() - start)
        FANOUT.observe(calls)
        return result

    async def lookup(
        self,
        job: JobRow,
        keys: pd.DataFrame,
        ts: pd.Series,
        fields: list[str] | None,
        routes: Routes,
        secret: str,
    ) -> tuple[pd.DataFrame, pd.Series]:
        via = EngineLookups(routes, secret, pool=self.pool())
        return await via.lookup_async(job, ts, keys, fields)


def _provider(graph: BranchGraph, via: EngineLookups) -> LookupProvider:
    """Lookups by dataset name, as extractors make them, through ``via``."""

    def provider(
        name: str, t: pd.Series, keys: pd.DataFrame, fields: list[str] | None
    ) -> tuple[pd.DataFrame, pd.Series]:
        return via.lookup(graph.serving_job(name), t, keys, fields)

    return provider


def _routes_for(graph: BranchGraph, routes: Routes) -> Routes:
    """Only the branch's own jobs' routes travel to the executor process."""
    hashes = {j.hash for j in graph.jobs}
    return Routes({k: a for k, a in routes.address.items() if k[0] in hashes})


# ---------------------------------------------------------------------- executor processes

_worker: dict[str, Any] = {}


def _init_worker(settings_json: str) -> None:
    _worker["settings"] = Settings.model_validate_json(settings_json)
    _worker["graphs"] = {}
    _worker["executors"] = {}
    _worker["http"] = httpx.Client()
    _worker["fanout"] = ThreadPoolExecutor(8)
    _worker["datasets"] = ThreadPoolExecutor(8)
    freeze_startup_heap()


def _ping(_: int) -> bool:
    return True


def _graph_in_worker(branch: str, head: int | None) -> BranchGraph:
    graphs: dict[tuple[str, int | None], BranchGraph] = _worker["graphs"]
    found = graphs.get((branch, head))
    if found is None:
        s: Settings = _worker["settings"]
        with connect(s, s.pg_schema) as conn, conn.transaction():
            commit: spec.CommitSpec | None = branches.checkout_commit(conn, head)
            jobs = tuple(registry.branch_jobs(conn, branch))
        found = BranchGraph(branch, head, commit, jobs)
        if len(graphs) > 64:
            graphs.clear()
            _worker["executors"].clear()
        graphs[(branch, head)] = found
    return found


def _run_in_worker(
    branch: str,
    head: int | None,
    plan: QueryPlan,
    frame: pd.DataFrame,
    ts: pd.Series,
    routes: Routes,
    secret: str,
) -> tuple[pd.DataFrame, int]:
    graph = _graph_in_worker(branch, head)
    via = EngineLookups(routes, secret, _worker["http"], _worker["fanout"])
    executors: dict[tuple[str, int | None], QueryExecutor] = _worker["executors"]
    executor = executors.get((branch, head))
    if executor is None:  # kept, so extractors' code is loaded once per commit
        executor = QueryExecutor(
            list(graph.featuresets.values()), graph.datasets, _provider(graph, via),
            _worker["datasets"],
        )  # fmt: skip
        executors[(branch, head)] = executor
    executor.provider = _provider(graph, via)
    return plain_values(executor.run(plan, frame, ts)), via.calls


def plain_values(result: pd.DataFrame) -> pd.DataFrame:
    """``result`` with each struct value a dict of its fields (nested ones, and those in
    lists and maps, too): a struct's class is built from the commit's shipped source in this
    process, under a module the server cannot import, so its objects do not pickle back.
    Answers carry structs as objects of their fields either way (``ops.rows.json_value``)."""
    for c in result.columns:
        col = result[c]
        if col.dtype == object and any(_holds_struct_value(v) for v in col.tolist()):
            result[c] = pd.Series([_plain(v) for v in col.tolist()], index=col.index,
                                  dtype=object, name=col.name)  # fmt: skip
    return result


def _holds_struct_value(value: Any) -> bool:
    if struct_fields(value) is not None:
        return True
    if isinstance(value, list | tuple | np.ndarray):
        return any(_holds_struct_value(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_struct_value(v) for v in value.values())
    return False


def _plain(value: Any) -> Any:
    if (fields := struct_fields(value)) is not None:
        return {k: _plain(v) for k, v in fields.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
