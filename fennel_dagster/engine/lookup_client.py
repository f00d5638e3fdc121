"""Asking engines for dataset lookups: batched per partition, fanned out concurrently.

The keys of one lookup are grouped by the partition of the dataset's serving job that owns
them (the producers' rule, ``engine.lookups.partitions_of``); each group is one request to the
engine that runs that partition, all groups at once over kept-alive connections. A partition
without a live engine fails fast with ``EngineUnavailable`` naming it; the others answer. Query servers and the platform's own client both read through this.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pandas as pd
import psycopg

from fennel_dagster.engine import lookups
from fennel_dagster.metadata import registry
from fennel_dagster.metadata.registry import JobRow
from fennel_dagster.ops.rows import from_records, json_value, to_records
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


class EngineLookups:
    """Lookups of one serving job's dataset at the engines that own its partitions."""

    def __init__(
        self,
        routes: Routes,
        secret: str,
        http: httpx.Client,
        fanout: ThreadPoolExecutor | None = None,
        timeout: float = 5.0,
    ) -> None:
        self.routes, self.secret = routes, secret
        self.http, self.fanout, self.timeout = http, fanout, timeout
        self.calls = 0  # engine requests made (a plan's lookup fan-out)

    def lookup(
        self,
        job: JobRow,
        ts: pd.Series,
        keys: pd.DataFrame,
        fields: list[str] | None,
    ) -> tuple[pd.DataFrame, pd.Series]:
        name = job.spec.dataset.name
        ds = job.spec.dataset
        keys = keys.reset_index(drop=True)
        parts = lookups.partitions_of(job, keys)
        key_recs = to_records(keys, list(ds.keys))
        stamps = [json_value(t) for t in pd.to_datetime(pd.Series(ts), utc=True)]
        groups: dict[int, list[int]] = {}
        for i, p in enumerate(parts):
            groups.setdefault(p, []).append(i)

        def ask(part: int, idx: list[int]) -> dict[str, Any]:
            address = self.routes.of(job, part, name)
            body = orjson.dumps({
                "job": job.hash, "partition": part, "fields": fields,
                "keys": [key_recs[i] for i in idx], "timestamps": [stamps[i] for i in idx],
            })  # fmt: skip
            try:
                resp = self.http.post(f"http://{address}/lookup", content=body, timeout=self.timeout,
                                      headers={SERVICE_HEADER: self.secret,
                                               "Content-Type": "application/json"})  # fmt: skip
            except httpx.HTTPError as e:
                raise EngineUnavailable(
                    f"the engine serving partition {part} of {job.name} (dataset {name}) at "
                    f"{address} did not answer ({type(e).__name__}); retry in a few seconds"
                ) from e
            reply: dict[str, Any] = orjson.loads(resp.content or b"{}")
            if resp.status_code == 409:
                raise EngineUnavailable(
                    f"partition {part} of {job.name} (dataset {name}) is moving between engines; "
                    "retry in a few seconds"
                )
            if resp.status_code != 200:
                raise LookupFailed(f"lookup of {name}: {reply.get('error', resp.status_code)}")
            return reply

        self.calls += len(groups)
        if len(groups) == 1 or self.fanout is None:
            replies = [ask(p, idx) for p, idx in groups.items()]
        else:
            replies = list(self.fanout.map(lambda kv: ask(*kv), groups.items()))
        rows: list[dict[str, Any]] = [{} for _ in key_recs]
        found = [False] * len(key_recs)
        for idx, reply in zip(groups.values(), replies, strict=True):
            for i, r, f in zip(idx, reply["rows"], reply["found"], strict=True):
                rows[i], found[i] = r, f
        wanted = [f for f in ds.fields if fields is None or f.name in fields]
        for i, rec in enumerate(rows):
            if not rec:  # the partition has no state yet
                rows[i] = {**{f.name: None for f in wanted}, **key_recs[i]}
        return from_records(rows, wanted), pd.Series(found, dtype=bool)
