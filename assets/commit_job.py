"""The commit job: one run carries out one commit (the two-ledger protocol), then reloads.

Launched by the commit sensor for a client's commit request, from the UI / ``dagster job
launch`` with the request as run config, or through Dagster's GraphQL API
(``submit_job_execution("fennel_commit", run_config=...)``). Run config (op ``commit``):
``request_id`` of a recorded request, or ``branch`` + ``message`` + ``wire_b64`` (the
canonical wire bytes of a CommitSpec, base64) for a direct submission.
"""

import base64
import getpass
import threading
from typing import Any

from dagster import AssetMaterialization, Config, OpExecutionContext, job, op

from fennel_dagster.client import LocalClient
from fennel_dagster.commit import branches, requests
from fennel_dagster.commit.catalog import asset_path
from fennel_dagster.metadata.db import connect
from fennel_dagster.settings import get_settings
from fennel_dagster.wire import decode

LOCATION = "fennel_dagster"


class CommitConfig(Config):  # type: ignore[misc]
    request_id: int = 0
    branch: str = "main"
    message: str = ""
    wire_b64: str = ""
    author: str = ""


@op(required_resource_keys={"fennel", "pyspark"})
def commit(context: OpExecutionContext, config: CommitConfig) -> dict:  # type: ignore[type-arg]
    """Returns the commit's summary (``CommitSummary.to_json``)."""
    settings = context.resources.fennel.settings()
    # a backfill runs on the run's dagster-pyspark session (started only if one is needed)
    with LocalClient(settings, spark=lambda: context.resources.pyspark.spark_session) as client:
        request_id = config.request_id

        # a backfill's progress, to the run's log and the waiting client; Spark's progress
        # thread reports too, so it has a connection of its own
        progress_conn = connect(settings, settings.pg_schema)
        guard = threading.Lock()

        def progress(line: str) -> None:
            context.log.info(line)
            with guard:
                requests.progress(progress_conn, request_id, line)

        client.on_progress = progress
        if not request_id:
            if not config.wire_b64:
                raise ValueError(
                    "commit: give request_id (a recorded commit request) or branch, message "
                    "and wire_b64 (base64 of the encoded CommitSpec) in the run config"
                )
            request_id = requests.submit(
                client.conn, config.branch, config.message or "commit via Dagster",
                config.author or getpass.getuser(), base64.b64decode(config.wire_b64),
            )  # fmt: skip

        def commit_to_branch(req: requests.CommitRequest):  # type: ignore[no-untyped-def]
            if req.branch not in client.list_branches():
                client.init_branch(req.branch)  # committing to a new branch creates it
                requests.progress(client.conn, req.id, f"created branch {req.branch!r}")
            client.branch = req.branch
            return client.commit_spec(decode(req.wire), branch=req.branch)

        try:
            result = requests.carry_out(client.conn, request_id, context.run_id, commit_to_branch)
        finally:
            progress_conn.close()
        record_materializations(context, client, result)
    context.log.info(str(result))
    reload_location(context)
    return result.to_json()


def record_materializations(
    context: OpExecutionContext,
    client: LocalClient,
    result: requests.CommitSummary,
) -> None:
    """Every dataset and featureset the branch now has is materialised by this commit (so
    committed assets do not show "Never materialized"), with its backfill when it had one."""
    branch = result.branch
    with client.conn.transaction():
        committed = branches.checkout(client.conn, branch)
    if committed is None:
        return
    backfills = {b.dataset: b for b in client.backfills}
    for ds in committed.datasets:
        if ds.meta.deleted:
            continue
        metadata: dict[str, Any] = {
            "commit": result.commit_id,
            "branch": branch,
            "version": ds.version,
        }
        bf = backfills.get(ds.name)
        if bf is not None:
            metadata |= {"backfill": bf.how, "backfill history rows": bf.messages,
                         "backfill rows out": bf.outputs, "backfill s": round(bf.seconds, 2)}  # fmt: skip
        context.log_event(AssetMaterialization(asset_path(branch, ds.name), metadata=metadata))
    for fs in committed.featuresets:
        context.log_event(AssetMaterialization(
            asset_path(branch, fs.name),
            metadata={"commit": result.commit_id, "branch": branch,
                      "extractors": ", ".join(e.name for e in fs.extractors)},
        ))  # fmt: skip


def reload_location(context: OpExecutionContext) -> None:
    """New assets appear without a restart: ask the webserver to reload this code location."""
    # imported here: only a commit run needs it, and every run process loads this module
    from dagster_graphql import DagsterGraphQLClient

    s = get_settings()
    try:
        DagsterGraphQLClient(s.host, port_number=s.dagster_port).reload_repository_location(
            LOCATION
        )
    except Exception as e:  # noqa: BLE001 - no webserver (e.g. a test run): nothing to reload
        context.log.warning(f"could not reload code location {LOCATION}: {e}")


@job(description="Commit feature definitions (two-ledger protocol); then reload the assets.")
def fennel_commit() -> None:
    commit()
