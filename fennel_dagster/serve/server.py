"""One query server's parts: the serving state, the query runner, the writer of logged rows
to webhook inbox topics, and the platform operations (commit, branches) it carries out for
clients."""

from __future__ import annotations

import io
import os
import socket
import threading
import time
from collections.abc import Callable
from contextlib import redirect_stdout
from typing import Any

import pandas as pd
import psycopg

from fennel_dagster.api import LogResult
from fennel_dagster.client.local import LocalClient
from fennel_dagster.commit.blueprint import BlueprintDiff
from fennel_dagster.commit.protocol import CommitOutcome
from fennel_dagster.engine.barrier import Barrier, unserved
from fennel_dagster.engine.dataset_rows import dataset_topic, read_rows
from fennel_dagster.engine.lookup_client import load_routes
from fennel_dagster.errors import ClientError
from fennel_dagster.metadata import offline_queries, server_stats
from fennel_dagster.metadata.db import connect
from fennel_dagster.offline.exchange import prepare_request, read_frame
from fennel_dagster.ops.rows import dumps
from fennel_dagster.serve.frames import BadRequest, NotFound
from fennel_dagster.serve.inbox import InboxWriter
from fennel_dagster.serve.queries import QueryRunner
from fennel_dagster.serve.state import BranchGraph, ServingState
from fennel_dagster.serve.stats import FeaturesetWindow
from fennel_dagster.settings import Settings
from fennel_dagster.wire import decode, spec

MAX_RESULT_ROWS = 1_000_000


class Server:
    def __init__(self, settings: Settings, processes: int = 2) -> None:
        self.settings = settings
        self.state = ServingState(settings)
        self.runner = QueryRunner(settings, processes=processes)
        self.inbox = InboxWriter(settings.kafka_servers)
        self._types: dict[tuple[str, int | None], dict[str, spec.DType]] = {}
        self._ops = threading.Lock()  # commits and branch operations: one at a time
        self.window = FeaturesetWindow(f"{socket.gethostname()}:{os.getpid()}")
        self._stop = threading.Event()

    def start(self) -> None:
        self.state.start()
        self.runner.warm()
        threading.Thread(target=self._publish_stats, name="stats", daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        self.state.stop()
        self.runner.close()
        self.inbox.close()

    def _publish_stats(self) -> None:
        """Every ``serve_stats_interval_s``: this server's window, for Dagster to show."""
        while not self._stop.wait(self.settings.serve_stats_interval_s):
            rows = self.window.snapshot()
            if not rows:
                continue
            try:
                with connect(self.settings, self.settings.pg_schema, autocommit=True) as conn:
                    server_stats.publish(conn, rows)
            except psycopg.OperationalError:
                pass  # the state listener reports the outage; stats resume with Postgres

    def feature_types(self, graph: BranchGraph) -> dict[str, spec.DType]:
        key = (graph.name, graph.head)
        found = self._types.get(key)
        if found is None:
            found = {f"{fs.name}.{f.name}": f.dtype
                     for fs in graph.featuresets.values() for f in fs.features}  # fmt: skip
            self._types[key] = found
        return found

    # ------------------------------------------------------------------ writes

    def log_rows(
        self,
        branch: str,
        webhook: str,
        endpoint: str,
        rows: list[dict[str, Any]],
        may_log: Callable[[str], None] | None = None,
    ) -> LogResult:
        """Rows into the endpoint's inbox topic, which every branch's datasets sourcing the
        webhook read (a webhook is the namespace's, as in Fennel). ``may_log`` is called with
        each branch the rows reach (to refuse a token that may not log there) before any
        row is sent."""
        self.state.graph(branch)  # the logging client's branch must exist
        inboxes: dict[str, int] = {}
        for graph in self.state.graphs.values():
            reached = graph.webhook_inboxes(webhook, endpoint)
            if reached and may_log is not None:
                may_log(graph.name)
            inboxes.update(reached)
        if not inboxes:
            raise BadRequest(
                f"webhook {webhook}.{endpoint}: no committed dataset has a source "
                f"Webhook(name={webhook!r}).endpoint({endpoint!r}) on any branch; commit one"
            )
        accepted = self.inbox.write(webhook, endpoint, inboxes, [dumps(rec) for rec in rows])
        return LogResult(accepted)

    def dataset_rows(
        self, branch: str, name: str, newest: int | None
    ) -> tuple[pd.DataFrame, spec.DatasetSpec]:
        """A dataset's rows (``newest``: its newest by timestamp), read from its topic."""
        topic, ds = dataset_topic(self.state.graph(branch).jobs, name)
        return read_rows(self.settings.kafka_servers, topic, ds, newest), ds

    def erase(self, branch: str, name: str, keys: pd.DataFrame) -> dict[str, Any]:
        with self._client(branch) as client:
            return dict(client.erase(name, keys).json())

    def _client(self, branch: str) -> LocalClient:
        return LocalClient(self.settings, branch=branch, author="query-server",
                           on_progress=lambda line: None)  # fmt: skip

    def commit(
        self, branch: str, wire: bytes, preview: bool, backfill: bool, ready_timeout: float = 0.0
    ) -> dict[str, Any]:
        try:
            request = decode(wire)
        except Exception as e:  # noqa: BLE001 - any undecodable body is the caller's error
            raise BadRequest(f"commit body is not a wire-encoded CommitSpec: {e}") from None
        if not isinstance(request, spec.CommitSpec):
            raise BadRequest(f"commit body is a {type(request).__name__}, not a CommitSpec")
        with self._ops, self._client(branch) as client, redirect_stdout(io.StringIO()) as out:
            result = client.commit_spec(request, preview=preview, branch=branch, backfill=backfill)
        self.state.refresh()
        if isinstance(result, BlueprintDiff):
            return {"preview": True, "summary": out.getvalue().splitlines()}
        if isinstance(result, CommitOutcome):
            answer = {"branch": result.branch, "commit_id": result.commit_id,
                      "created": len(result.diff.create), "released": len(result.diff.release),
                      "backfills": len(client.backfills)}  # fmt: skip
        else:
            answer = result.to_json()
        return {**answer, **self.wait_served(branch, ready_timeout)}

    def wait_served(self, branch: str, timeout: float) -> dict[str, Any]:
        """Up to ``timeout`` seconds for a live engine to serve every partition of the
        branch's serving jobs (a lookup before that meets 503). ``ready``: whether they
        are; ``starting``: the partitions not served yet (``job pN``)."""
        deadline = time.monotonic() + timeout
        while True:
            starting = unserved(self.state.graph(branch).jobs, self.state.routes)
            if not starting or time.monotonic() >= deadline:
                return {"ready": not starting, "starting": starting}
            time.sleep(0.2)
            with connect(self.settings, self.settings.pg_schema, autocommit=True) as conn:
                self.state.routes = load_routes(conn, self.settings.engine_lease_s)

    def sleep(self, branch: str, timeout: float) -> dict[str, Any]:
        """The barrier of ``LocalClient.sleep`` over the branch's jobs."""
        return Barrier(self.settings, self.state.graph(branch).jobs).wait(timeout).to_json()

    # ------------------------------------------------------------------ offline queries

    def query_offline(
        self, branch: str, body: dict[str, Any], df: pd.DataFrame | None
    ) -> dict[str, Any]:
        fmap = body.get("feature_to_column_map") or {}
        if not isinstance(fmap, dict):
            raise BadRequest("feature_to_column_map: an object of feature -> input column")
        try:
            request = prepare_request(
                self.settings, body["inputs"], body["outputs"], body["timestamp_column"],
                input_dataframe=df, input_s3=body.get("input_s3"),
                output_s3=body.get("output_s3"), feature_to_column_map=fmap,
                input_format=body.get("input_format", "parquet"),
                output_format=body.get("output_format", "parquet"),
            )  # fmt: skip
        except ClientError as e:
            raise BadRequest(str(e).replace("input_dataframe", "data")) from None
        with connect(self.settings, self.settings.pg_schema, autocommit=True) as conn:
            rid = offline_queries.insert(conn, branch, request)
            status = offline_queries.status(conn, rid)
        assert status is not None
        return status.to_dict()

    def offline_status(self, request_id: int, cancel: bool) -> dict[str, Any]:
        with connect(self.settings, self.settings.pg_schema, autocommit=True) as conn:
            if cancel:
                status = offline_queries.request_cancel(conn, request_id)
            else:
                status = offline_queries.status(conn, request_id)
        if status is None:
            raise NotFound(f"no offline query {request_id}")
        return status.to_dict()

    def offline_result(self, status: dict[str, Any]) -> pd.DataFrame:
        if status["state"] != "done":
            raise BadRequest(
                f"offline query {status['request_id']} is {status['state']}, not done: "
                "poll its status until it is"
            )
        rows = int(status["result"]["rows"])
        if rows > MAX_RESULT_ROWS:
            raise BadRequest(
                f"offline query {status['request_id']} has {rows} rows, over the "
                f"{MAX_RESULT_ROWS} a reply carries: read {status['result']['output_uri']}"
            )
        return read_frame(self.settings, status["result"]["output_uri"])

    def init_branch(self, branch: str, clone_from: str | None) -> None:
        with self._ops, self._client(branch) as client:
            if clone_from is None:
                client.init_branch(branch)
            else:
                client.clone_branch(branch, from_branch=clone_from)
        self.state.refresh()

    def delete_branch(self, branch: str) -> None:
        with self._ops, self._client(branch) as client:
            client.delete_branch(branch)
        self.state.refresh()
