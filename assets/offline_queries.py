"""Offline queries as Dagster runs, and training sets as scheduled assets.

``fennel_offline_query``: one run carries out one offline query request (recorded by a
client or a query server; the ``offline_query_requests`` sensor launches it) on the run's
dagster-pyspark session, with its progress in the run's log and its output recorded as a
materialization of ``<branch>/offline_queries``.

``training_set(...)``: a featureset's training data as an asset of the user's own Dagster
code — the outputs as of each row of a spine on S3, refreshed by a schedule.
"""

from collections.abc import Sequence

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    AssetsDefinition,
    Config,
    DefaultScheduleStatus,
    MaterializeResult,
    MetadataValue,
    OpExecutionContext,
    ScheduleDefinition,
    asset,
    define_asset_job,
    job,
    op,
)
from dagster_pyspark import LazyPySparkResource

from fennel_dagster.batch.offline_runner import execute
from fennel_dagster.errors import ExecutionError
from fennel_dagster.metadata import offline_queries
from fennel_dagster.metadata.db import connect
from fennel_dagster.metadata.offline_queries import OfflineQueryStatus
from fennel_dagster.offline.exchange import prepare_request
from resources import FennelSettings


class OfflineQueryFailed(ExecutionError):
    """The run's query failed or was cancelled: the run fails with its recorded error."""


class OfflineQueryConfig(Config):  # type: ignore[misc]
    request_id: int


def queries_key(branch: str) -> AssetKey:
    return AssetKey([branch, "offline_queries"])


def _metadata(st: OfflineQueryStatus) -> dict:  # type: ignore[type-arg]
    res = st.result or {}
    return {
        "request id": st.request_id,
        "branch": st.branch,
        "outputs": ", ".join(st.request.outputs),
        "input": MetadataValue.path(st.request.input_uri),
        "output": MetadataValue.path(st.request.output_uri),
        "rows": int(res.get("rows", 0)),
        "duration s": float(res.get("seconds", 0.0)),
    }


def _finished(st: OfflineQueryStatus | None, request_id: int) -> OfflineQueryStatus:
    if st is None:
        raise OfflineQueryFailed(
            f"offline query {request_id} is not pending: another run has it, or it was "
            "cancelled before it started"
        )
    if st.state != "done":
        raise OfflineQueryFailed(
            f"offline query {request_id} {st.state}: {(st.result or {}).get('error')}"
        )
    return st


@op(required_resource_keys={"fennel", "pyspark"})
def offline_query(context: OpExecutionContext, config: OfflineQueryConfig) -> None:
    settings = context.resources.fennel.settings()
    spark = context.resources.pyspark.spark_session
    st = _finished(
        execute(spark, settings, config.request_id, context.run_id, context.log.info),
        config.request_id,
    )
    context.log_event(AssetMaterialization(queries_key(st.branch), metadata=_metadata(st)))


@job(description="Run one offline (point-in-time) query on Spark: a client's request.")
def fennel_offline_query() -> None:
    offline_query()


def training_set(
    name: str,
    inputs: Sequence[str],
    outputs: Sequence[str],
    timestamp_column: str,
    input_s3: str,
    output_s3: str,
    branch: str = "main",
    cron: str | None = None,
    input_format: str = "parquet",
    feature_to_column_map: dict[str, str] | None = None,
) -> list[AssetsDefinition | ScheduleDefinition]:
    """An asset ``<branch>/training/<name>`` holding ``outputs`` as of each row of the spine
    at ``input_s3`` (written to ``output_s3``), and with ``cron`` a schedule refreshing it.
    Its materialization is an offline query (recorded like a client's, so it can be
    followed and cancelled the same way)."""
    key = AssetKey([branch, "training", name])

    @asset(
        key=key,
        group_name=f"training_{branch.replace('/', '_').replace('-', '_')}",
        kinds={"spark"},
        description=f"Training set {name}: {', '.join(outputs)} as of each row of {input_s3}",
        tags={"fennel/entity": "training-set"},
    )
    def training(
        context: AssetExecutionContext, fennel: FennelSettings, pyspark: LazyPySparkResource
    ) -> MaterializeResult:
        settings = fennel.settings()
        request = prepare_request(
            settings, inputs, outputs, timestamp_column, input_s3=input_s3, output_s3=output_s3,
            feature_to_column_map=feature_to_column_map, input_format=input_format,
        )  # fmt: skip
        with connect(settings, settings.pg_schema) as conn:
            request_id = offline_queries.insert(conn, branch, request)
        st = _finished(
            execute(pyspark.spark_session, settings, request_id, context.run_id,
                    context.log.info),
            request_id,
        )  # fmt: skip
        return MaterializeResult(metadata=_metadata(st))

    out: list[AssetsDefinition | ScheduleDefinition] = [training]
    if cron is not None:
        out.append(ScheduleDefinition(
            name=f"{'_'.join(key.path).replace('-', '_').replace('/', '_')}_schedule",
            job=define_asset_job(f"refresh_{name}", selection=[key]), cron_schedule=cron,
            default_status=DefaultScheduleStatus.RUNNING,
        ))  # fmt: skip
    return out
