"""Asking engines for dataset lookups: batched per partition, fanned out concurrently.

The keys of one lookup are grouped by the partition of the dataset's serving job that owns
them (the producers' rule, ``engine.lookups.partitions_of``); each group is one request to the
engine that runs that partition, all groups at once over kept-alive connections. A partition
without a live engine fails fast with ``EngineUnavailable`` naming it; the others answer. Query servers and the platform's own client both read through this.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pandas as pd
import psycopg

from fennel_dagster.engine import lookups
from fennel_dagster.engine.lookup_pool import LookupPool
from fennel_dagster.metadata import registry
from fennel_dagster.metadata.registry import JobRow
from fennel_dagster.ops.columns import positional
from fennel_dagster.ops.keys import micros_of
from fennel_dagster.ops.rows import to_records, typed_columns
from fennel_dagster.query.lookup import LookupFailed
from fennel_dagster.wire import spec

SERVICE_HEADER = "X-Fennel-Service"
ENGINE_KEEPALIVE_S = 75  # how long an engine keeps an idle connection open (callers: less)


class EngineUnavailable(LookupFailed):
    """A key's partition has no live engine: fail fast, the caller retries."""


@dataclass(frozen=True)
class Routes:
    """Where each (job hash, partition) is served: the owning engine's lookup address."""

    address: dict[tuple[str, int], str] = field(default_factory=dict)

    def of(self, job: JobRow, partition: int, dataset: str) -> str:
        found = self.address.get((job.hash, partition))
        if found is None:
            raise EngineUnavailable(
                f"no live engine serves partition {partition} of {job.name} (dataset {dataset}) "
                "right now; retry in a few seconds, and if it persists check the engine runs"
            )
        return found


def load_routes(conn: psycopg.Connection, lease_s: float) -> Routes:
    """The routes as the registry has them: runners heard from within the lease, on live
    engines."""
    engines = {e.id: e.address for e in registry.live_engines(conn)}
    return Routes({
        k: engines[owner] for k, (owner, age) in registry.runner_owners(conn).items()
        if owner in engines and age < lease_s
    })  # fmt: skip


@dataclass(frozen=True)
class Want:
    """One lookup of a batch: keys of ``job``'s dataset as JSON records, at times in µs
    since the epoch."""

    job: JobRow
    keys: list[dict[str, Any]]
    stamps_us: list[int]
    fields: list[str] | None


@dataclass(frozen=True)
class _Ask:
    """One engine request of a lookup: the keys of one partition."""

    partition: int
    address: str
    body: bytes
    rows: list[int]  # where its keys are in the lookup


class EngineLookups:
    """Lookups of one serving job's dataset at the engines that own its partitions, from a
    thread (``lookup``, over ``http``) or from the event loop (``lookup_async``, over
    ``pool``: no thread waits on an engine)."""

    def __init__(
        self,
        routes: Routes,
        secret: str,
        http: httpx.Client | None = None,
        fanout: ThreadPoolExecutor | None = None,
        timeout: float = 5.0,
        pool: LookupPool | None = None,
    ) -> None:
        self.routes, self.secret = routes, secret
        self.http, self.fanout, self.timeout, self.pool = http, fanout, timeout, pool
        self.calls = 0  # HTTP requests made to engines (a plan's lookup fan-out)

    def lookup(
        self,
        job: JobRow,
        ts: pd.Series,
        keys: pd.DataFrame,
        fields: list[str] | None,
    ) -> tuple[pd.DataFrame, pd.Series]:
        key_recs = to_records(positional(keys), list(job.spec.dataset.keys))
        asks = self._asks(job, key_recs, micros_of(pd.Series(ts)), fields)
        self.calls += len(asks)
        if self.http is None:
            raise RuntimeError("EngineLookups.lookup needs an httpx.Client (http=)")
        http = self.http

        def ask(a: _Ask) -> dict[str, Any]:
            try:
                resp = http.post(f"http://{a.address}/lookup", content=a.body,
                                 timeout=self.timeout, headers=self._headers())  # fmt: skip
            except httpx.HTTPError as e:
                raise self._unreachable(job, a, e) from e
            return self._reply(job, a, resp.status_code, resp.content)

        if len(asks) == 1 or self.fanout is None:
            replies = [ask(a) for a in asks]
        else:
            replies = list(self.fanout.map(ask, asks))
        rows, found = _records(job, key_recs, asks, replies, fields)
        return pd.DataFrame(typed_columns(rows, _wanted(job, fields))), pd.Series(found, dtype=bool)

    async def lookup_async(
        self,
        job: JobRow,
        ts: pd.Series,
        keys: pd.DataFrame,
        fields: list[str] | None,
    ) -> tuple[pd.DataFrame, pd.Series]:
        key_recs = to_records(positional(keys), list(job.spec.dataset.keys))
        got, found = await self.lookup_records_async(
            job, key_recs, micros_of(pd.Series(ts)), fields
        )
        return pd.DataFrame(got), found

    async def lookup_records_async(
        self,
        job: JobRow,
        keys: list[dict[str, Any]],
        stamps_us: list[int],
        fields: list[str] | None,
    ) -> tuple[dict[str, pd.Series], pd.Series]:
        """``lookup_async`` of keys as JSON records and times as µs since the epoch; the rows
        as a column per field."""
        return (await self.lookup_many_async([Want(job, keys, stamps_us, fields)]))[0]

    async def lookup_many_async(
        self, wants: list[Want]
    ) -> list[tuple[dict[str, pd.Series], pd.Series]]:
        """Several lookups at once (a query's datasets): the requests each engine gets from
        all of them travel in one HTTP request (``POST /lookups``), all engines at once."""
        answers = await self.lookup_many_records(wants)
        return [as_columns(w, rows, found) for w, (rows, found) in zip(wants, answers, strict=True)]

    async def lookup_many_records(
        self, wants: list[Want]
    ) -> list[tuple[list[dict[str, Any]], list[bool]]]:
        """``lookup_many_async`` answered as JSON records of the wanted fields (the keys
        asked for, found or not) and found flags: no frames, for a server's small queries."""
        if self.pool is None:
            raise RuntimeError("EngineLookups.lookup_async needs a LookupPool (pool=)")
        pool = self.pool
        credential = f"{SERVICE_HEADER}: {self.secret}\r\n".encode()
        headers = credential + b"Content-Type: application/json\r\n"
        asks = [self._asks(w.job, w.keys, w.stamps_us, w.fields) for w in wants]
        by_address: dict[str, list[tuple[int, _Ask]]] = {}
        for n, group in enumerate(asks):
            for a in group:
                by_address.setdefault(a.address, []).append((n, a))
        self.calls += len(by_address)

        async def post(address: str, path: str, body: bytes, first: tuple[int, _Ask]) -> Any:
            job = wants[first[0]].job
            try:
                return await pool.post(address, path, body, headers, self.timeout)
            except (OSError, TimeoutError) as e:  # refused, reset, closed, no answer in time
                raise self._unreachable(job, first[1], e) from e

        async def ask(address: str, group: list[tuple[int, _Ask]]) -> list[dict[str, Any]]:
            if len(group) == 1:
                n, a = group[0]
                status, content = await post(address, "/lookup", a.body, group[0])
                return [self._reply(wants[n].job, a, status, content)]
            body = b'{"lookups":[' + b",".join(a.body for _, a in group) + b"]}"
            status, content = await post(address, "/lookups", body, group[0])
            if status != 200:  # the whole request refused (credential, malformed)
                n, a = group[0]
                return [self._reply(wants[n].job, a, status, content)]
            answers = orjson.loads(content)["answers"]
            return [self._reply(wants[n].job, a, int(ans.pop("status")), b"", ans)
                    for (n, a), ans in zip(group, answers, strict=True)]  # fmt: skip

        replied = await asyncio.gather(*(ask(ad, g) for ad, g in by_address.items()))
        replies: dict[int, dict[int, dict[str, Any]]] = {}  # want -> ask's partition -> reply
        for sent, answers in zip(by_address.values(), replied, strict=True):
            for (n, a), reply in zip(sent, answers, strict=True):
                replies.setdefault(n, {})[a.partition] = reply
        return [
            _records(w.job, w.keys, group, [replies[n][a.partition] for a in group], w.fields)
            for n, (w, group) in enumerate(zip(wants, asks, strict=True))
        ]  # fmt: skip

    def _asks(
        self,
        job: JobRow,
        key_recs: list[dict[str, Any]],
        stamps: list[int],
        fields: list[str] | None,
    ) -> list[_Ask]:
        ds = job.spec.dataset
        groups: dict[int, list[int]] = {}
        for i, p in enumerate(lookups.partitions_of_records(job, key_recs)):
            groups.setdefault(p, []).append(i)
        asks = [
            _Ask(part, self.routes.of(job, part, ds.name), orjson.dumps({
                "job": job.hash, "partition": part, "fields": fields,
                "keys": [key_recs[i] for i in idx], "micros": [stamps[i] for i in idx],
            }), idx)
            for part, idx in groups.items()
        ]  # fmt: skip
        return asks

    def _headers(self) -> dict[str, str]:
        return {SERVICE_HEADER: self.secret, "Content-Type": "application/json"}

    def _unreachable(self, job: JobRow, a: _Ask, e: Exception) -> EngineUnavailable:
        return EngineUnavailable(
            f"the engine serving partition {a.partition} of {job.name} (dataset "
            f"{job.spec.dataset.name}) at {a.address} did not answer ({type(e).__name__}); "
            "retry in a few seconds"
        )

    def _reply(
        self,
        job: JobRow,
        a: _Ask,
        status: int,
        content: bytes,
        reply: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """An engine's answer to ``a`` (``content``, or ``reply`` already decoded from a
        ``/lookups`` answer), or the error its status means."""
        name = job.spec.dataset.name
        if reply is None:
            reply = orjson.loads(content or b"{}")
        if status == 409:
            raise EngineUnavailable(
                f"partition {a.partition} of {job.name} (dataset {name}) is moving between "
                "engines; retry in a few seconds"
            )
        if status != 200:
            raise LookupFailed(f"lookup of {name}: {reply.get('error', status)}")
        return reply


def as_columns(
    want: Want, rows: list[dict[str, Any]], found: list[bool]
) -> tuple[dict[str, pd.Series], pd.Series]:
    """A ``lookup_many_records`` answer as ``lookup_many_async`` gives it: a typed column per
    wanted field, and the found flags."""
    return typed_columns(rows, _wanted(want.job, want.fields)), pd.Series(found, dtype=bool)


def _wanted(job: JobRow, fields: list[str] | None) -> list[spec.FieldSpec]:
    return [f for f in job.spec.dataset.fields if fields is None or f.name in fields]


def _records(
    job: JobRow,
    key_recs: list[dict[str, Any]],
    asks: list[_Ask],
    replies: list[dict[str, Any]],
    fields: list[str] | None,
) -> tuple[list[dict[str, Any]], list[bool]]:
    """The engines' rows in the order of ``key_recs``; a key whose partition has no state
    yet is a row of nulls with the key asked for."""
    rows: list[dict[str, Any]] = [{} for _ in key_recs]
    found = [False] * len(key_recs)
    for a, reply in zip(asks, replies, strict=True):
        for i, r, f in zip(a.rows, reply["rows"], reply["found"], strict=True):
            rows[i], found[i] = r, f
    names = [f.name for f in _wanted(job, fields)]
    for i, rec in enumerate(rows):
        if not rec:
            rows[i] = {**dict.fromkeys(names), **key_recs[i]}
    return rows, found
