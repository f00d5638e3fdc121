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
from fennel_dagster.metadata.migrate import incarnation, migrate
from resources import FennelSettings, MetadataStore
from sensors import last_launched, request_cursor, unreachable

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
    schema = fennel.settings().pg_schema
    try:
        with metadata.connect(autocommit=True) as conn:
            migrate(conn)
            born = incarnation(conn)
            found = offline_queries.pending_after(conn, last_launched(context.cursor, schema, born))
    except psycopg.OperationalError as e:
        return unreachable(e)
    if not found:
        return SkipReason("no new offline queries")
    return SensorResult(
        run_requests=[
            RunRequest(
                run_key=f"{schema}@{born}/offline-query-{i}",
                run_config={"ops": {"offline_query": {"config": {"request_id": i}}}},
                tags={"fennel/offline-query": str(i)},
            )
            for i in found
        ],
        cursor=request_cursor(schema, born, found[-1]),
    )
