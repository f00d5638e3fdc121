"""``Client``: commit feature definitions and manage branches against the platform.

This client drives the definition server and the two-ledger commit protocol directly, using
the settings' Postgres, Kafka and S3; the Dagster-driven path reuses the same protocol.
"""

from __future__ import annotations

import getpass
import re
from collections.abc import Iterable
from typing import Any

import psycopg

from fennel_dagster.commit import bank, branches, janitor, protocol
from fennel_dagster.commit.blueprint import BlueprintDiff
from fennel_dagster.commit.physical import PhysicalAssets
from fennel_dagster.commit.preview import diff, render
from fennel_dagster.commit.server import DefinitionServer
from fennel_dagster.declare import commit_spec
from fennel_dagster.metadata.db import connect
from fennel_dagster.metadata.migrate import migrate
from fennel_dagster.settings import Settings, get_settings
from fennel_dagster.wire import encode, spec


class Client:
    def __init__(
        self,
        settings: Settings | None = None,
        branch: str = "main",
        author: str | None = None,
        via_dagster: bool = False,
    ) -> None:
        """``via_dagster=True``: commits go through the Dagster deployment (a commit request
        the commit sensor turns into a run) instead of running the protocol in-process."""
        self.via_dagster = via_dagster
        self.settings = settings or get_settings()
        self.branch = branch
        self.author = author or getpass.getuser()
        self.physical = PhysicalAssets(self.settings)
        self.server = DefinitionServer(self.settings.namespace, self.settings.partitions)
        self._conn: psycopg.Connection | None = None
        self._lock: psycopg.Connection | None = None

    # ---------------------------------------------------------------- connections

    @property
    def conn(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = connect(self.settings, self.settings.pg_schema)
            migrate(self._conn)
        return self._conn

    @property
    def lock_conn(self) -> psycopg.Connection:
        if self._lock is None or self._lock.closed:
            self._lock = connect(self.settings, self.settings.pg_schema, autocommit=True)
        return self._lock

    def close(self) -> None:
        for c in (self._conn, self._lock):
            if c is not None and not c.closed:
                c.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- commit

    def commit(
        self,
        message: str,
        datasets: Iterable[Any] = (),
        featuresets: Iterable[Any] = (),
        preview: bool = False,
        incremental: bool = False,
        env: str | None = None,
        backfill: bool = False,
        branch: str | None = None,
    ) -> protocol.CommitOutcome | BlueprintDiff | dict[str, Any]:
        """Validate, compile and commit; ``preview=True`` prints and returns the diff only.

        A rejected commit raises ``CommitRejected`` listing every validation error.
        ``backfill`` is recorded for the batch layer, which replays history on Spark.
        """
        target = branch or self.branch
        request = commit_spec(message, datasets, featuresets, env=env, incremental=incremental)
        return self.commit_spec(request, preview=preview, branch=target)

    def commit_spec(
        self, request: spec.CommitSpec, preview: bool = False, branch: str | None = None
    ) -> protocol.CommitOutcome | BlueprintDiff | dict[str, Any]:
        target = branch or self.branch
        with self.conn.transaction():
            previous = branches.checkout(self.conn, target)
            base = protocol.head(self.conn, target)
        result = self.server.process_spec(request, previous)
        result.raise_for_errors()
        if preview:
            with self.conn.transaction():
                d = diff(
                    result.blueprints,
                    bank.branch_refs(self.conn, target),
                    bank.live_hashes(self.conn),
                )
            print(render(d))
            return d
        if self.via_dagster:
            return self._commit_via_dagster(request, target)
        return protocol.commit(
            self.conn, self.lock_conn, self.physical, target, result.blueprints,
            encode(result.commit), request.message, self.author, expected_head=base,
        )  # fmt: skip

    def _commit_via_dagster(self, request: spec.CommitSpec, branch: str) -> dict[str, Any]:
        """Record a commit request, let Dagster's commit run carry it out, stream progress."""
        from fennel_dagster.commit import requests

        rid = requests.submit(self.conn, branch, request.message, self.author, encode(request))
        print(f"commit request {rid} recorded; waiting for its Dagster run", flush=True)
        return requests.wait(
            self.conn, rid, on_progress=lambda line: print(f"  {line}", flush=True)
        )

    def recover(self, wait: float = 10.0) -> dict[str, int]:
        """Finish or roll back whatever interrupted commits left behind; waits up to ``wait``
        seconds for branches whose (possibly dying) committer still holds the lock."""
        return janitor.recover(self.conn, self.lock_conn, self.physical, wait=wait)

    # ---------------------------------------------------------------- branches

    def init_branch(self, name: str) -> None:
        branches.init_branch(self.conn, name)

    def clone_branch(self, name: str, from_branch: str | None = None) -> int:
        return branches.clone_branch(self.conn, self.lock_conn, from_branch or self.branch, name)

    def delete_branch(self, name: str) -> None:
        branches.delete_branch(self.conn, self.lock_conn, self.physical, name)

    def list_branches(self) -> list[str]:
        with self.conn.transaction():
            return branches.list_branches(self.conn)

    def checkout(self, name: str) -> spec.CommitSpec | None:
        """Switch this client to branch ``name``; returns its committed graph."""
        with self.conn.transaction():
            graph = branches.checkout(self.conn, name)
        self.branch = name
        return graph

    # ---------------------------------------------------------------- lookups

    def lookup(
        self,
        dataset: Any,
        keys: Any,
        timestamps: Any = None,
        fields: list[str] | None = None,
        timeout: float = 10.0,
    ) -> tuple[Any, Any]:
        """Point-in-time lookup of a keyed dataset on this branch, from the engines.

        Each key goes to the engine that owns its partition (``fennel-dagster engine``);
        returns (rows with the dataset's fields, a boolean Series: was the key found).
        ``timestamps`` default to now; a row is the key's value as of its timestamp.
        """
        import json as _json
        import urllib.error
        import urllib.request

        import pandas as pd

        from fennel_dagster.engine import lookups, registry
        from fennel_dagster.engine.jobs.common import dataset_of
        from fennel_dagster.ops.rows import from_records, json_value, to_records

        name = getattr(dataset, "__fennel_dataset_name__", dataset)
        keys = pd.DataFrame(keys).reset_index(drop=True)
        ts = (
            pd.Series([pd.Timestamp.now(tz="UTC")] * len(keys))
            if timestamps is None
            else pd.to_datetime(pd.Series(timestamps), utc=True).reset_index(drop=True)
        )
        with self.conn.transaction():
            jobs = lookups.branch_jobs(self.conn, self.branch)
            if not any(dataset_of(j.spec["dataset"]).name == name for j in jobs):
                raise lookups.LookupError_(
                    f"dataset {name} is not committed on branch {self.branch!r}; commit it first"
                )
            job = lookups.serving_job(jobs, name)
            owners = registry.runner_owners(self.conn)
            engines = {e.id: e.address for e in registry.live_engines(self.conn)}
        ds = dataset_of(job.spec["dataset"])
        parts = lookups.partitions_of(job, keys)
        key_recs = to_records(keys, list(ds.keys))
        stamps = [json_value(t) for t in ts]
        rows: list[dict[str, Any]] = [{} for _ in key_recs]
        found = [False] * len(key_recs)
        for part in sorted(set(parts)):
            idx = [i for i, p in enumerate(parts) if p == part]
            owner = owners.get((job.hash, part), (None, 0.0))[0]
            address = engines.get(owner or "")
            if address is None:
                raise lookups.LookupError_(
                    f"no live engine runs partition {part} of {job.name} (dataset {name}); "
                    "start one with `fennel-dagster engine`"
                )
            body = _json.dumps({
                "job": job.hash, "partition": part, "fields": fields,
                "keys": [key_recs[i] for i in idx], "timestamps": [stamps[i] for i in idx],
            }).encode()  # fmt: skip
            req = urllib.request.Request(
                f"http://{address}/lookup", body, {"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(req, timeout=timeout) as resp:
                    reply = _json.loads(resp.read())
            except urllib.error.HTTPError as e:
                detail = _json.loads(e.read() or b"{}").get("error", str(e))
                raise lookups.LookupError_(f"lookup of {name} on {address}: {detail}") from e
            for i, r, f in zip(idx, reply["rows"], reply["found"], strict=True):
                rows[i], found[i] = r, f
        wanted = [f for f in ds.fields if fields is None or f.name in fields]
        for i, rec in enumerate(rows):
            if not rec:  # the partition has no state yet
                rows[i] = {**{f.name: None for f in wanted}, **key_recs[i]}
        return from_records(rows, wanted), pd.Series(found, dtype=bool)

    # ---------------------------------------------------------------- write path

    def log(self, webhook: str, endpoint: str, df: Any) -> int:
        """Send rows to a webhook endpoint (``Webhook(name=webhook).endpoint(endpoint)``).

        The rows go to the endpoint's inbox topic; every dataset sourcing from the endpoint
        ingests them (schema-checked, bad rows to its error topic). Returns the row count.
        """
        from confluent_kafka import Producer

        from fennel_dagster.engine import lookups
        from fennel_dagster.ops.rows import dumps, to_records

        with self.conn.transaction():
            jobs = lookups.branch_jobs(self.conn, self.branch)
        wanted = f"{webhook}.{endpoint}"
        inbox = f".webhook.{re.sub(r'[^A-Za-z0-9._-]', '_', wanted)}."  # + the blueprint hash
        topics = {
            j.spec["webhook_topic"]: j.partitions
            for j in jobs
            if j.kind == "source" and inbox in str(j.spec.get("webhook_topic") or "")
        }
        if not topics:
            raise ValueError(
                f"no dataset on branch {self.branch!r} has a source "
                f"Webhook(name={webhook!r}).endpoint({endpoint!r}); commit one first"
            )
        producer = Producer({"bootstrap.servers": self.settings.kafka_servers,
                             "enable.idempotence": True})  # fmt: skip
        records = to_records(df)
        for topic, partitions in topics.items():
            for i, rec in enumerate(records):
                producer.produce(topic, dumps(rec), partition=i % partitions)
        if producer.flush(30):
            raise RuntimeError(f"log to {wanted}: Kafka did not acknowledge every row in 30 s")
        return len(records)
