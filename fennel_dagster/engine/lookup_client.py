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

import aiohttp
import httpx
import orjson
import pandas as pd
import psycopg

from fennel_dagster.engine import lookups
from fennel_dagster.metadata import registry
from fennel_dagster.metadata.registry import JobRow
from fennel_dagster.ops.columns import positional
from fennel_dagster.ops.keys import micros_of
from fennel_dagster.ops.rows import to_records, typed_columns
from fennel_dagster.query.lookup import LookupFailed

SERVICE_HEADER = "X-Fennel-Service"


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
class _Ask:
    """One engine request of a lookup: the keys of one partition."""

    partition: int
    address: str
    body: bytes
    rows: list[int]  # where its keys are in the lookup


class EngineLookups:
    """Lookups of one serving job's dataset at the engines that own its partitions, from a
    thread (``lookup``, over ``http``) or from the event loop (``lookup_async``, over
    ``session``: no thread waits on an engine)."""

    def __init__(
        self,
        routes: Routes,
        secret: str,
        http: httpx.Client | None = None,
        fanout: ThreadPoolExecutor | None = None,
        timeout: float = 5.0,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.routes, self.secret = routes, secret
        self.http, self.fanout, self.timeout, self.session = http, fanout, timeout, session
        self.calls = 0  # engine requests made (a plan's lookup fan-out)

    def lookup(
        self,
        job: JobRow,
        ts: pd.Series,
        keys: pd.DataFrame,
        fields: list[str] | None,
    ) -> tuple[pd.DataFrame, pd.Series]:
        key_recs = to_records(positional(keys), list(job.spec.dataset.keys))
        asks = self._asks(job, key_recs, micros_of(pd.Series(ts)), fields)
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
        got, found = self._assemble(job, key_recs, asks, replies, fields)
        return pd.DataFrame(got), found

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
        asks = self._asks(job, keys, stamps_us, fields)
        if self.session is None:
            raise RuntimeError("EngineLookups.lookup_async needs an aiohttp session (session=)")
        session = self.session
        limit = aiohttp.ClientTimeout(total=self.timeout)

        async def ask(a: _Ask) -> dict[str, Any]:
            try:
                async with session.post(f"http://{a.address}/lookup", data=a.body,
                                        headers=self._headers(), timeout=limit) as resp:  # fmt: skip
                    content = await resp.read()
            except (aiohttp.ClientError, TimeoutError) as e:
                raise self._unreachable(job, a, e) from e
            return self._reply(job, a, resp.status, content)

        replies = await asyncio.gather(*(ask(a) for a in asks))
        return self._assemble(job, keys, asks, list(replies), fields)

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
        self.calls += len(asks)
        return asks

    def _headers(self) -> dict[str, str]:
        return {SERVICE_HEADER: self.secret, "Content-Type": "application/json"}

    def _unreachable(self, job: JobRow, a: _Ask, e: Exception) -> EngineUnavailable:
        return EngineUnavailable(
            f"the engine serving partition {a.partition} of {job.name} (dataset "
            f"{job.spec.dataset.name}) at {a.address} did not answer ({type(e).__name__}); "
            "retry in a few seconds"
        )

    def _reply(self, job: JobRow, a: _Ask, status: int, content: bytes) -> dict[str, Any]:
        name = job.spec.dataset.name
        reply: dict[str, Any] = orjson.loads(content or b"{}")
        if status == 409:
            raise EngineUnavailable(
                f"partition {a.partition} of {job.name} (dataset {name}) is moving between "
                "engines; retry in a few seconds"
            )
        if status != 200:
            raise LookupFailed(f"lookup of {name}: {reply.get('error', status)}")
        return reply

    def _assemble(
        self,
        job: JobRow,
        key_recs: list[dict[str, Any]],
        asks: list[_Ask],
        replies: list[dict[str, Any]],
        fields: list[str] | None,
    ) -> tuple[dict[str, pd.Series], pd.Series]:
        rows: list[dict[str, Any]] = [{} for _ in key_recs]
        found = [False] * len(key_recs)
        for a, reply in zip(asks, replies, strict=True):
            for i, r, f in zip(a.rows, reply["rows"], reply["found"], strict=True):
                rows[i], found[i] = r, f
        wanted = [f for f in job.spec.dataset.fields if fields is None or f.name in fields]
        for i, rec in enumerate(rows):
            if not rec:  # the partition has no state yet
                rows[i] = {**{f.name: None for f in wanted}, **key_recs[i]}
        return typed_columns(rows, wanted), pd.Series(found, dtype=bool)
