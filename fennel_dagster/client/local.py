"""``LocalClient``: the platform driven in process, for the platform's own processes.

It drives the definition server and the two-ledger commit protocol directly with the
settings' Postgres, Kafka and S3 (and the engines' service credential): the query servers,
Dagster's commit runs, the demo and the tests use it. User code talks to a query server
through ``Client`` instead, holding a token rather than a database DSN.
"""

from __future__ import annotations

import getpass
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import httpx
import pandas as pd
import psycopg
from confluent_kafka import Producer

from fennel_dagster.api import (
    DatasetRef,
    FeatureRef,
    LogResult,
    answer_shape,
    dataset_name,
    feature_name,
    input_frame,
    now_for,
    refuse_feature_log,
)
from fennel_dagster.client.offline import wait_until_finished
from fennel_dagster.commit import bank, branches, janitor, protocol, requests
from fennel_dagster.commit.blueprint import BlueprintDiff
from fennel_dagster.commit.compiler import job_of
from fennel_dagster.commit.physical import PhysicalAssets
from fennel_dagster.commit.preview import diff, render
from fennel_dagster.commit.server import DefinitionServer
from fennel_dagster.declare import commit_spec
from fennel_dagster.engine import lookups
from fennel_dagster.engine.barrier import Barrier, BarrierReport, sleep_timeout
from fennel_dagster.engine.lookup_client import EngineLookups, load_routes
from fennel_dagster.errors import ClientError
from fennel_dagster.metadata import offline_queries, registry, tokens
from fennel_dagster.metadata.db import connect
from fennel_dagster.metadata.migrate import migrate
from fennel_dagster.offline.exchange import prepare_request, read_frame
from fennel_dagster.ops.rows import dumps, to_records
from fennel_dagster.query.execute import QueryExecutor
from fennel_dagster.query.plan import QueryPlanError, plan_query
from fennel_dagster.settings import Settings, get_settings
from fennel_dagster.wire import encode, plan, spec

if TYPE_CHECKING:
    from fennel_dagster.engine.backfill import BackfillReport


class LocalClient:
    def __init__(
        self,
        settings: Settings | None = None,
        branch: str = "main",
        author: str | None = None,
        via_dagster: bool = False,
        on_progress: Callable[[str], None] | None = None,
        spark: Callable[[], Any] | None = None,
    ) -> None:
        """``via_dagster=True``: commits go through the Dagster deployment (a commit request
        the commit sensor turns into a run) instead of running the protocol in-process.
        ``on_progress`` receives a commit's progress lines (backfills); default: printed.
        ``spark`` gives the Spark session backfills run on (default: one of the client's own,
        from the settings; a Dagster run passes its dagster-pyspark resource's)."""
        self.via_dagster = via_dagster
        self.on_progress = on_progress or (lambda line: print(line, flush=True))
        self._spark: Any = None
        self._spark_factory = spark
        self.backfills: list[BackfillReport] = []  # the last commit's backfills
        self.settings = settings or get_settings()
        self.branch = branch
        self.author = author or getpass.getuser()
        self.physical = PhysicalAssets(self.settings)
        self.server = DefinitionServer(self.settings.namespace, self.settings.partitions)
        self._conn: psycopg.Connection | None = None
        self._lock: psycopg.Connection | None = None
        self._http: httpx.Client | None = None
        self._jobs: dict[tuple[str, str], registry.JobRow] = {}  # specs decoded, by text

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
        if self._http is not None:
            self._http.close()

    def __enter__(self) -> LocalClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- commit

    def commit(
        self,
        message: str,
        datasets: Iterable[type] = (),
        featuresets: Iterable[type] = (),
        preview: bool = False,
        incremental: bool = False,
        env: str | None = None,
        backfill: bool = True,
        branch: str | None = None,
    ) -> protocol.CommitOutcome | BlueprintDiff | requests.CommitSummary:
        """Validate, compile and commit; ``preview=True`` prints and returns the diff only.

        A rejected commit raises ``CommitRejected`` listing every validation error. ``env``
        selects the sources, pipelines and extractors whose ``env=`` names it.
        """
        target = branch or self.branch
        request = commit_spec(message, datasets, featuresets, env=env, incremental=incremental)
        return self.commit_spec(request, preview=preview, branch=target, backfill=backfill)

    def commit_spec(
        self,
        request: spec.CommitSpec,
        preview: bool = False,
        branch: str | None = None,
        backfill: bool = True,
    ) -> protocol.CommitOutcome | BlueprintDiff | requests.CommitSummary:
        target = branch or self.branch
        with self.conn.transaction():
            previous = branches.checkout(self.conn, target)
            base = protocol.head(self.conn, target)
        result = self.server.process_spec(request, previous)
        result.raise_for_errors()
        if preview or not backfill:
            with self.conn.transaction():
                d = diff(
                    result.blueprints,
                    bank.branch_refs(self.conn, target),
                    bank.live_hashes(self.conn),
                )
            if not backfill:
                protocol.refuse_backfill(d)  # before a Dagster run is asked for
            if preview:
                print(render(d))
                return d
        if self.via_dagster:
            return self._commit_via_dagster(request, target)
        return protocol.commit(
            self.conn, self.lock_conn, self.physical, target, result.blueprints,
            encode(result.commit), request.message, self.author, expected_head=base,
            backfill=backfill, before_commit_point=self._backfill,
        )  # fmt: skip

    def _backfill(self, d: BlueprintDiff, attempt: str) -> None:
        """Seed the pipelines the commit creates from history on Spark (``engine.backfill``)."""
        created = [job_of(bp) for bp in d.create if bp.kind == "job"]
        if not any(isinstance(j, plan.PipelineJobSpec) for j in created):
            return
        existing = [job_of(bp) for bp in (*d.reuse, *d.keep) if bp.kind == "job"]
        from fennel_dagster.engine.backfill import Backfiller  # PySpark: only when needed

        backfiller = Backfiller(self.settings, self.spark, self.on_progress)
        self.backfills = backfiller.run(created, existing, attempt)

    def spark(self) -> Any:
        """This client's Spark session (started on first use: backfills, offline queries)."""
        if self._spark is None:
            from fennel_dagster.batch.spark import spark_session  # PySpark: only when used

            make = self._spark_factory or (
                lambda: spark_session(self.settings, app="fennel-dagster client")
            )
            self._spark = make()
        return self._spark

    def _commit_via_dagster(self, request: spec.CommitSpec, branch: str) -> requests.CommitSummary:
        """Record a commit request, let Dagster's commit run carry it out, stream progress."""
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
        """Create an empty branch and check it out (as Fennel's client does)."""
        branches.init_branch(self.conn, name)
        self.branch = name

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

    # ---------------------------------------------------------------- read path

    def lookup(
        self,
        dataset: DatasetRef,
        keys: pd.DataFrame,
        timestamps: pd.Series | None = None,
        fields: list[str] | None = None,
        timeout: float = 10.0,
    ) -> tuple[pd.DataFrame | pd.Series, pd.Series]:
        """Point-in-time lookup of a keyed dataset on this branch, from the engines.

        Each key goes to the engine that owns its partition of the dataset's serving job;
        returns (rows with the dataset's fields, or the one field's column when one is
        asked, as Fennel answers; a boolean Series: was the key found). ``timestamps``
        default to now; a row is the key's value as of its timestamp.
        """
        keys = pd.DataFrame(keys).reset_index(drop=True)
        name = dataset_name(dataset)
        data, found = self._lookup(name, now_for(keys, timestamps), keys, fields, timeout)
        return answer_shape(data, found, fields, self._types(name))

    def _types(self, name: str) -> dict[str, spec.DType]:
        """The dataset's field types on this branch, as its serving job has them."""
        with self.conn.transaction():
            job = lookups.serving_job(
                registry.branch_jobs(self.conn, self.branch, self._jobs), name
            )
        return {f.name: f.dtype for f in job.spec.dataset.fields}

    def _lookup(
        self,
        name: str,
        ts: pd.Series,
        keys: pd.DataFrame,
        fields: list[str] | None,
        timeout: float = 10.0,
    ) -> tuple[pd.DataFrame, pd.Series]:
        with self.conn.transaction():
            job = lookups.serving_job(
                registry.branch_jobs(self.conn, self.branch, self._jobs), name
            )
            routes = load_routes(self.conn, self.settings.engine_lease_s)
            secret = tokens.service_secret(self.conn)
        if self._http is None:
            self._http = httpx.Client()
        return EngineLookups(routes, secret, self._http, timeout=timeout).lookup(
            job, ts, keys, fields
        )

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
        """Features of ``outputs`` for each row of ``input_df`` (columns named by ``inputs``),
        computed by the branch's extractors in this process; their dataset lookups go to the
        engines like ``lookup``. ``input_dataframe=`` is Fennel's name for ``input_df``."""
        refuse_feature_log(log, workflow, sampling_rate)
        input_df = input_frame(input_df, input_dataframe)
        graph = self.checkout(self.branch)
        if graph is None:
            raise QueryPlanError(f"branch {self.branch!r} has no commit yet; commit first")
        qplan = plan_query(graph.featuresets, [feature_name(i) for i in inputs],
                           [feature_name(o) for o in outputs])  # fmt: skip
        datasets = {d.name: d for d in graph.datasets}
        executor = QueryExecutor(graph.featuresets, datasets, self._lookup)
        return executor.run(qplan, input_df, now_for(input_df, timestamps))

    def query_offline(
        self,
        inputs: list[FeatureRef],
        outputs: list[FeatureRef],
        timestamp_column: str,
        input_dataframe: pd.DataFrame | None = None,
        input_s3: str | None = None,
        output_s3: str | None = None,
        feature_to_column_map: dict[str, str] | None = None,
        workflow: str | None = None,  # Fennel's label for its logs: accepted, not recorded
        *,
        format: str = "pandas",  # noqa: A002 - Fennel's name
        input_format: str = "parquet",
        output_format: str = "parquet",
        wait: bool = False,
        timeout: float = 3600.0,
    ) -> dict[str, Any] | pd.DataFrame:
        """Point-in-time features on Spark: each row's ``outputs`` as of its own
        ``timestamp_column``. Returns the request's status at once (``request_id``; follow it
        with ``track_offline_query``, stop it with ``cancel_offline_query``). ``wait=True``
        returns when it ends: a DataFrame for a DataFrame input with ``format="pandas"``,
        else the final status. Runs as a Dagster run (``via_dagster``) or on this client's
        Spark session."""
        request = prepare_request(
            self.settings, [feature_name(i) for i in inputs], [feature_name(o) for o in outputs],
            timestamp_column, input_dataframe, input_s3, output_s3, feature_to_column_map,
            input_format, output_format,
        )  # fmt: skip
        with self.conn.transaction():
            request_id = offline_queries.insert(self.conn, self.branch, request)
        if not self.via_dagster:
            from fennel_dagster.batch.offline_runner import execute  # PySpark: only when used

            worker = threading.Thread(
                target=execute, args=(self.spark(), self.settings, request_id,
                                      f"local-{request_id}", self.on_progress),
                name=f"offline-query-{request_id}", daemon=True,
            )  # fmt: skip
            worker.start()
        if not wait:
            return self.track_offline_query(request_id)
        final = self.wait_offline_query(request_id, timeout)
        if input_dataframe is not None and format == "pandas":
            return read_frame(self.settings, request.output_uri)
        return final

    def track_offline_query(self, request_id: int) -> dict[str, Any]:
        """An offline query's state, progress (stage, tasks, ETA) and result."""
        with self.conn.transaction():
            st = offline_queries.status(self.conn, int(request_id))
        if st is None:
            raise ClientError(f"no offline query {request_id}")
        return st.to_dict()

    def cancel_offline_query(self, request_id: int) -> dict[str, Any]:
        with self.conn.transaction():
            st = offline_queries.request_cancel(self.conn, int(request_id))
        if st is None:
            raise ClientError(f"no offline query {request_id}")
        return st.to_dict()

    def wait_offline_query(self, request_id: int, timeout: float = 3600.0) -> dict[str, Any]:
        """Poll until the query ends; raises ``OfflineQueryFailed`` unless it is done."""
        return wait_until_finished(lambda: self.track_offline_query(request_id), timeout)

    # ---------------------------------------------------------------- write path

    def log(self, webhook: str, endpoint: str, df: pd.DataFrame) -> LogResult:
        """Send rows to a webhook endpoint (``Webhook(name=webhook).endpoint(endpoint)``).

        The rows go to the endpoint's inbox topic; every dataset sourcing from the endpoint
        ingests them (schema-checked, bad rows to its error topic).
        """
        with self.conn.transaction():
            jobs = registry.branch_jobs(self.conn, self.branch, self._jobs)
        inboxes = registry.webhook_inboxes(jobs, webhook, endpoint)
        if not inboxes:
            raise ClientError(
                f"no dataset on branch {self.branch!r} has a source "
                f"Webhook(name={webhook!r}).endpoint({endpoint!r}); commit one first"
            )
        producer = Producer({"bootstrap.servers": self.settings.kafka_servers,
                             "enable.idempotence": True})  # fmt: skip
        records = to_records(df)
        for topic, partitions in inboxes.items():
            for i, rec in enumerate(records):
                producer.produce(topic, dumps(rec), partition=i % partitions)
        if producer.flush(30):
            raise ClientError(
                f"log to {webhook}.{endpoint}: Kafka did not acknowledge every row in 30 s"
            )
        return LogResult(len(records))

    # ---------------------------------------------------------------- test hooks

    def sleep(self, seconds: float | None = None, timeout: float | None = None) -> BarrierReport:
        """A barrier: returns once every stream job of the branch has processed everything
        logged (and produced to its topics) before the call, or raises ``BarrierTimeout``
        naming the job partitions still behind. ``seconds``, Fennel's fixed wait, is the
        least the barrier waits before giving up (60 s by default); ``timeout`` overrides."""
        with self.conn.transaction():
            jobs = registry.branch_jobs(self.conn, self.branch, self._jobs)
        return Barrier(self.settings, jobs).wait(sleep_timeout(seconds, timeout))

    def is_integration_client(self) -> bool:
        """True: a real deployment answers (Fennel's tests branch on it)."""
        return True

    def integration_mode(self) -> str:
        return "platform"
