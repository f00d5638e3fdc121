"""What a query server knows, held in memory: each branch's committed graph and serving
jobs, the engines' routes, and the tokens.

One listener thread keeps it fresh. It LISTENs on ``fennel_serving`` (the triggers of
migration 0005 notify on commits, branch changes, job and engine changes, token changes) and
reloads what changed; partition ownership, which moves with runner heartbeats rather than
rows, is re-read every ``routes_every`` seconds. Requests only ever read the current
snapshot, so no request waits on Postgres, and a Postgres outage leaves the server answering
from what it last knew (reported once, as every outage is).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import psycopg

from fennel_dagster.commit.errors import BranchNotSynced, branch_not_synced
from fennel_dagster.engine import lookups
from fennel_dagster.engine.lookup_client import Routes, load_routes
from fennel_dagster.engine.outage import Outage
from fennel_dagster.heap import freeze_built
from fennel_dagster.metadata import commits, registry, tokens
from fennel_dagster.metadata.db import connect
from fennel_dagster.metadata.migrate import migrate
from fennel_dagster.metadata.registry import JobRow
from fennel_dagster.metadata.tokens import TokenRow
from fennel_dagster.settings import Settings
from fennel_dagster.wire import decode, spec

log = logging.getLogger("fennel_dagster.serve")
CHANNEL = "fennel_serving"


@dataclass(frozen=True)
class BranchGraph:
    """One branch's committed graph as the read path needs it."""

    name: str
    head: int | None
    commit: spec.CommitSpec | None
    jobs: tuple[JobRow, ...] = ()

    @property
    def featuresets(self) -> dict[str, spec.FeaturesetSpec]:
        return {fs.name: fs for fs in self.commit.featuresets} if self.commit else {}

    @property
    def datasets(self) -> dict[str, spec.DatasetSpec]:
        return {d.name: d for d in self.commit.datasets} if self.commit else {}

    def serving_job(self, dataset: str) -> JobRow:
        return lookups.serving_job(self.jobs, dataset)

    def webhook_inboxes(self, webhook: str, endpoint: str) -> dict[str, int]:
        return registry.webhook_inboxes(self.jobs, webhook, endpoint)


UnknownBranch = BranchNotSynced  # a request on a branch that does not exist (Fennel's words)


class ServingState:
    def __init__(self, settings: Settings, routes_every: float = 1.0) -> None:
        self.settings = settings
        self.routes_every = routes_every
        self.graphs: dict[str, BranchGraph] = {}
        self.routes = Routes()
        self.tokens: dict[str, TokenRow] = {}
        self.service_secret = ""
        self.generation = 0  # bumped on every graph reload: caches keyed by it stay correct
        self._decoded: dict[tuple[str, str], registry.JobRow] = {}  # job specs, by their text
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._outage = Outage(f"query-server-{id(self)}", "postgres", log)
        with connect(settings, settings.pg_schema) as conn:
            migrate(conn)
            self._reload(conn)

    # ------------------------------------------------------------------ reads

    def graph(self, branch: str) -> BranchGraph:
        g = self.graphs.get(branch)
        if g is None:
            raise branch_not_synced(branch, sorted(self.graphs))
        return g

    # ------------------------------------------------------------------ refresh

    def start(self) -> None:
        self._thread = threading.Thread(target=self._listen, name="serving-state", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def refresh(self) -> None:
        """Reload now (after this server's own commit or branch change: read your writes)."""
        with connect(self.settings, self.settings.pg_schema) as conn:
            self._reload(conn)

    def _reload(self, conn: psycopg.Connection) -> None:
        with conn.transaction():
            self.service_secret = tokens.service_secret(conn)
            self.tokens = {t.id: t for t in tokens.list_tokens(conn)}
            graphs: dict[str, BranchGraph] = {}
            for name in commits.list_branches(conn):
                branch = commits.get_branch(conn, name)
                head = branch.head if branch else None
                old = self.graphs.get(name)
                jobs = tuple(registry.branch_jobs(conn, name, self._decoded))
                if old is not None and old.head == head:
                    graphs[name] = BranchGraph(name, head, old.commit, jobs)
                    continue
                wire = commits.commit_wire(conn, head) if head is not None else None
                commit = decode(wire) if wire is not None else None
                assert commit is None or isinstance(commit, spec.CommitSpec)
                graphs[name] = BranchGraph(name, head, commit, jobs)
            self.graphs = graphs
            self.generation += 1
        freeze_built()
        self._reload_routes(conn)

    def _reload_routes(self, conn: psycopg.Connection) -> None:
        with conn.transaction():
            self.routes = load_routes(conn, self.settings.engine_lease_s)

    def _listen(self) -> None:
        while not self._stop.is_set():
            try:
                with connect(self.settings, self.settings.pg_schema, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self._reload(conn)  # whatever changed while not listening
                    ended = self._outage.end()
                    if ended is not None:
                        registry.record_outage(conn, ended)
                    self._follow(conn)
            except psycopg.OperationalError as e:
                self._outage.begin(e, "answering from the last known graphs and routes")
                self._stop.wait(1.0)
            except Exception:  # noqa: BLE001 - the server keeps answering from what it knows
                log.exception("query server: refreshing the serving state failed; retrying")
                self._stop.wait(1.0)

    def _follow(self, conn: psycopg.Connection) -> None:
        prefix = f"{self.settings.pg_schema}."
        routes_at = time.monotonic()
        while not self._stop.is_set():
            first = list(conn.notifies(timeout=self.routes_every, stop_after=1))
            if any(n.payload.startswith(prefix) for n in first):
                list(conn.notifies(timeout=0.005))  # a commit notifies in a burst
                self._reload(conn)
                routes_at = time.monotonic()
            elif time.monotonic() - routes_at >= self.routes_every:
                self._reload_routes(conn)
                routes_at = time.monotonic()

    def wait_for(self, predicate: object, timeout: float = 10.0) -> None:
        """Tests and the CLI: block until ``predicate(self)`` holds (a commit has arrived)."""
        assert callable(predicate)
        deadline = time.monotonic() + timeout
        while not predicate(self):
            if time.monotonic() > deadline:
                raise TimeoutError("the serving state did not catch up in time")
            time.sleep(0.05)
