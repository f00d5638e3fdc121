"""``Client``: commit feature definitions and manage branches against the platform.

This client drives the definition server and the two-ledger commit protocol directly, using
the settings' Postgres, Kafka and S3; the Dagster-driven path reuses the same protocol.
"""

from __future__ import annotations

import getpass
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
        self, settings: Settings | None = None, branch: str = "main", author: str | None = None
    ) -> None:
        self.settings = settings or get_settings()
        self.branch = branch
        self.author = author or getpass.getuser()
        self.physical = PhysicalAssets(self.settings)
        self.server = DefinitionServer(self.settings.namespace)
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
    ) -> protocol.CommitOutcome | BlueprintDiff:
        """Validate, compile and commit; ``preview=True`` prints and returns the diff only.

        A rejected commit raises ``CommitRejected`` listing every validation error.
        ``backfill`` is recorded for the batch layer, which replays history on Spark.
        """
        target = branch or self.branch
        request = commit_spec(message, datasets, featuresets, env=env, incremental=incremental)
        return self.commit_spec(request, preview=preview, branch=target)

    def commit_spec(
        self, request: spec.CommitSpec, preview: bool = False, branch: str | None = None
    ) -> protocol.CommitOutcome | BlueprintDiff:
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
        return protocol.commit(
            self.conn, self.lock_conn, self.physical, target, result.blueprints,
            encode(result.commit), request.message, self.author, expected_head=base,
        )  # fmt: skip

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
