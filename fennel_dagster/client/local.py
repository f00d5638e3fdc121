"""``LocalClient``: the platform driven in process, for the platform's own processes.

It drives the definition server and the two-ledger commit protocol directly with the
settings' Postgres, Kafka and S3 (and the engines' service credential): the query servers,
Dagster's commit runs, the demo and the tests use it. User code talks to a query server
through ``Client`` instead, holding a token rather than a database DSN.
"""

from __future__ import annotations

import getpass
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import httpx
import pandas as pd
import psycopg
from confluent_kafka import Producer

from fennel_dagster.api import (
    BranchName,
    DatasetRef,
    Done,
    FeatureRef,
    LogResult,
    answer_shape,
    check_input_columns,
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
from fennel_dagster.declare.answers import struct_objects
from fennel_dagster.declare.lookup import serve_outside_runs
from fennel_dagster.engine import lookups
from fennel_dagster.engine.barrier import Barrier, BarrierReport, sleep_timeout
from fennel_dagster.engine.dataset_rows import dataset_topic, read_rows
from fennel_dagster.engine.lookup_client import EngineLookups, load_routes
from fennel_dagster.errors import ClientError
from fennel_dagster.metadata import offline_queries, registry, tokens
from fennel_dagster.metadata.db import connect
from fennel_dagster.metadata.migrate import migrate
from fennel_dagster.offline.exchange import prepare_request, read_frame
from fennel_dagster.ops.rows import dumps, to_records
from fennel_dagster.query.execute import QueryExecutor
from fennel_dagster.query.lookup import as_key_types
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

    @property
    def branch(self) -> BranchName:
        """The checked-out branch: ``client.branch``, or ``client.branch()`` as in Fennel."""
        return self._branch

    @branch.setter
    def branch(self, name: str) -> None:
        self._branch = BranchName(name)

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
    ) -> Done:
        """Validate, compile and commit; ``preview=True`` prints the diff and changes nothing.

        A rejected commit raises ``CommitRejected`` listing every validation error. ``env``
        selects the sources, pipelines and extractors whose ``env=`` names it. The answer's
        ``outcome`` is the ``CommitOutcome`` (the diff for a preview; a Dagster run's
        ``CommitSummary`` with ``via_dagster``). After a commit, ``Dataset.lookup`` outside
        an extractor (in a test) is answered by this client, as by the mock that committed.
        """
        target = branch or self.branch
        request = commit_spec(message, datasets, featuresets, env=env, incremental=incremental)
        out = self.commit_spec(request, preview=preview, branch=target, backfill=backfill)
        if preview:
            return Done(f"preview of {message!r}: valid", request, outcome=out)
        serve_outside_runs(self._dataset_lookup)
        details = {"commit_id": out.commit_id} if isinstance(out, protocol.CommitOutcome) else {}
        return Done(f"committed {message!r}", request, details, outcome=out)

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

    def init_branch(self, name: str) -> Done:
        """Create an empty branch and check it out (as Fennel's client does)."""
        branches.init_branch(self.conn, name)
        self.branch = name
        return Done(f"created branch {name!r}")

    def clone_branch(
        self, name: str, from_branch: str | None = None, from_name: str | None = None
    ) -> Done:
        """A new branch with ``from_branch``'s (or ``from_name``'s, as Fennel's reference page
        names it) definitions and data, checked out."""
        source = from_branch or from_name or self.branch
        refs = branches.clone_branch(self.conn, self.lock_conn, source, name)
        self.branch = name
        return Done(f"cloned branch {source!r} into {name!r}", details={"refs": refs})

    def delete_branch(self, name: str, *, even_main: bool = False) -> Done:
        """Delete a branch and release its assets; deleting the checked-out one checks main
        out. The main branch cannot be deleted (as in Fennel); ``even_main=True`` is an
        operator's teardown of the whole platform."""
        branches.delete_branch(self.conn, self.lock_conn, self.physical, name, even_main)
        if self.branch == name:
            self.branch = MAIN_BRANCH
        return Done(f"deleted branch {name!r}")

    def list_branches(self) -> list[str]:
        with self.conn.transaction():
            return branches.list_branches(self.conn)

    def checkout(self, name: str, init: bool = False) -> spec.CommitSpec | None:
        """Switch this client to branch ``name`` (``init``: creating it if missing); returns
        its committed graph. A missing branch is only named, as Fennel's clients do: the
        next request says it does not exist."""
        known = self.list_branches()
        if init and name not in known:
            self.init_branch(name)
            return None
        self.branch = name
        return self.graph() if name in known else None

    def graph(self, branch: str | None = None) -> spec.CommitSpec | None:
        """A branch's committed graph (default: the checked-out one; None: nothing yet)."""
        with self.conn.transaction():
            return branches.checkout(self.conn, branch or self.branch)

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
        return {f.name: f.dtype for f in self._serving_job(name).spec.dataset.fields}

    def _branch_jobs(self, branch: str | None = None) -> list[registry.JobRow]:
        """A branch's jobs (default: the checked-out one, which must exist)."""
        with self.conn.transaction():
            name = branch or self.branch
            protocol.head(self.conn, name)  # a missing branch: BranchNotFoundError names it
            return registry.branch_jobs(self.conn, name, self._jobs)

    def _serving_job(self, name: str) -> registry.JobRow:
        return lookups.serving_job(self._branch_jobs(), name)

    def _dataset_lookup(
        self, name: str, ts: pd.Series, keys: pd.DataFrame, fields: list[str] | None
    ) -> tuple[pd.DataFrame, pd.Series]:
        """``Dataset.lookup`` called outside an extractor (a test's): struct values as
        objects, as the extractors' lookups answer them."""
        rows, found = self._lookup(name, ts, keys, fields)
        return struct_objects(rows, self._serving_job(name).spec.dataset.fields), found

    def inspect(self, dataset: DatasetRef, n: int = 10) -> pd.DataFrame:
        """Fennel's look at a dataset's rows: its ``n`` newest (by its timestamp), read from
        the dataset's topic."""
        if n < 1:
            raise ClientError(f"inspect({dataset_name(dataset)}, n={n}): n must be at least 1")
        topic, ds = dataset_topic(self._branch_jobs(), dataset_name(dataset))
        return read_rows(self.settings.kafka_servers, topic, ds, newest=n)

    def get_dataset_df(self, dataset_name: DatasetRef) -> pd.DataFrame:
        """Every row of a dataset (its topic's), ordered by its timestamp."""
        topic, ds = dataset_topic(self._branch_jobs(), _name_of(dataset_name))
        return read_rows(self.settings.kafka_servers, topic, ds)

    def erase(self, dataset_name: DatasetRef, erase_keys: pd.DataFrame) -> Done:
        """Fennel's ``erase`` (hard-erasing the rows of erase keys, and rows with them that
        arrive later) is not carried out by the platform's engines yet: refused, naming the
        dataset, rather than answered as done."""
        name = _name_of(dataset_name)
        dataset_topic(self._branch_jobs(), name)  # an unknown dataset says so first
        raise ClientError(
            f"erase({name}): the platform does not erase keys yet (its indexes, topics and "
            "offline tables keep them); MockClient.erase has the semantics. Drop the call, "
            "or delete the rows with a delete (cdc) row per key"
        )

    def _lookup(
        self,
        name: str,
        ts: pd.Series,
        keys: pd.DataFrame,
        fields: list[str] | None,
        timeout: float = 10.0,
    ) -> tuple[pd.DataFrame, pd.Series]:
        job = self._serving_job(name)
        with self.conn.transaction():
            routes = load_routes(self.conn, self.settings.engine_lease_s)
            secret = tokens.service_secret(self.conn)
        types = {f.name: f.dtype for f in job.spec.dataset.fields}
        keys = as_key_types(keys, {k: types[k] for k in keys.columns if k in types})
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
        check_input_columns([feature_name(i) for i in inputs], input_df.columns)
        graph = self.graph()
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

    def log(
        self, webhook: str, endpoint: str, df: pd.DataFrame, batch_size: int = 1000
    ) -> LogResult:
        """Send rows to a webhook endpoint (``Webhook(name=webhook).endpoint(endpoint)``).

        The rows go to the endpoint's inbox topic, which every branch's datasets sourcing
        from the endpoint read (a webhook is the namespace's, not a branch's, as in Fennel);
        each ingests them (schema-checked, bad rows to its error topic). They are sent
        ``batch_size`` rows at a time, each batch acknowledged by Kafka before the next.
        """
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ClientError(f"log(batch_size={batch_size!r}): give a whole number of rows >= 1")
        inboxes = webhook_inboxes(self._branch_jobs, self.list_branches(), self.branch,
                                  webhook, endpoint)  # fmt: skip
        producer = Producer({"bootstrap.servers": self.settings.kafka_servers,
                             "enable.idempotence": True})  # fmt: skip
        records = to_records(df)
        for start in range(0, len(records), batch_size):
            for topic, partitions in inboxes.items():
                for i, rec in enumerate(records[start : start + batch_size], start):
                    producer.produce(topic, dumps(rec), partition=i % partitions)
            if producer.flush(30):
                raise ClientError(
                    f"log to {webhook}.{endpoint}: Kafka did not acknowledge rows "
                    f"{start}..{start + batch_size - 1} in 30 s (rows before them were logged)"
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


MAIN_BRANCH = "main"


def _name_of(dataset: DatasetRef) -> str:
    return dataset_name(dataset)


def webhook_inboxes(
    jobs_of: Callable[[str], Sequence[registry.JobRow]],
    branches_: Sequence[str],
    here: str,
    webhook: str,
    endpoint: str,
) -> dict[str, int]:
    """Where rows logged to ``webhook.endpoint`` go: the inbox topic of every source job on
    any branch reading it (one topic per endpoint, shared by the branches). ``here``, the
    logging client's branch, must exist; no dataset anywhere on the endpoint is an error."""
    if here not in branches_:
        raise ClientError(
            f"branch {here!r} does not exist: init_branch({here!r}) or "
            f"checkout({here!r}, init=True) creates it"
        )
    inboxes: dict[str, int] = {}
    for b in branches_:
        inboxes.update(registry.webhook_inboxes(jobs_of(b), webhook, endpoint))
    if not inboxes:
        raise ClientError(
            f"no committed dataset has a source Webhook(name={webhook!r})"
            f".endpoint({endpoint!r}) on any branch; commit one first"
        )
    return inboxes
