"""Commit sensor: one commit run per pending commit request (cursor: the last request id)."""

import psycopg
from dagster import (
    DefaultSensorStatus,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from fennel_dagster.commit import requests
from fennel_dagster.metadata.migrate import incarnation, migrate
from resources import FennelSettings, MetadataStore
from sensors import last_launched, request_cursor, unreachable

COMMIT_JOB = "fennel_commit"  # assets/commit_job.py; Definitions binds the name


@sensor(
    job_name=COMMIT_JOB,
    minimum_interval_seconds=2,
    default_status=DefaultSensorStatus.RUNNING,
    description="Launches the commit run of every commit request a client records.",
)
def commit_requests(
    context: SensorEvaluationContext, fennel: FennelSettings, metadata: MetadataStore
) -> SensorResult | SkipReason:
    settings = fennel.settings()
    # the cursor (and run keys) name the metadata schema and its incarnation: the Dagster
    # instance may outlive both
    schema = settings.pg_schema
    try:
        with metadata.connect(autocommit=True) as conn:
            migrate(conn)
            born = incarnation(conn)
            found = requests.pending(conn, last_launched(context.cursor, schema, born))
    except psycopg.OperationalError as e:
        return unreachable(e)
    if not found:
        return SkipReason("no new commit requests")
    return SensorResult(
        run_requests=[
            RunRequest(
                run_key=f"{schema}@{born}/commit-request-{r.id}",
                run_config={"ops": {"commit": {"config": {"request_id": r.id}}}},
                tags={"fennel/branch": r.branch, "fennel/commit-request": str(r.id)},
            )
            for r in found
        ],
        cursor=request_cursor(schema, born, found[-1].id),
    )
