"""Offline query sensor: one run per pending offline query request (cursor = last id)."""

import psycopg
from dagster import (
    DefaultSensorStatus,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from fennel_dagster.metadata import offline_queries
from fennel_dagster.metadata.migrate import migrate
from resources import FennelSettings, MetadataStore
from sensors import unreachable

OFFLINE_QUERY_JOB = "fennel_offline_query"  # assets/offline_queries.py


@sensor(
    job_name=OFFLINE_QUERY_JOB,
    minimum_interval_seconds=2,
    default_status=DefaultSensorStatus.RUNNING,
    description="Launches a Spark run for every offline query a client or server records.",
)
def offline_query_requests(
    context: SensorEvaluationContext, fennel: FennelSettings, metadata: MetadataStore
) -> SensorResult | SkipReason:
    settings = fennel.settings()
    schema, _, last = (context.cursor or "").rpartition(":")
    after = int(last) if schema == settings.pg_schema and last.isdigit() else 0
    try:
        with metadata.connect(autocommit=True) as conn:
            migrate(conn)
            found = offline_queries.pending_after(conn, after)
    except psycopg.OperationalError as e:
        return unreachable(e)
    if not found:
        return SkipReason("no new offline queries")
    return SensorResult(
        run_requests=[
            RunRequest(
                run_key=f"{settings.pg_schema}/offline-query-{i}",
                run_config={"ops": {"offline_query": {"config": {"request_id": i}}}},
                tags={"fennel/offline-query": str(i)},
            )
            for i in found
        ],
        cursor=f"{settings.pg_schema}:{found[-1]}",
    )
