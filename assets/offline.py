"""Offline tables of derived datasets as time-partitioned assets: replay from Dagster's UI.

One asset per derived offline dataset of a branch, ``<branch>/offline/<Dataset>``, partitioned
by event date, downstream of the dataset and of its inputs' offline tables (a source
dataset's table is its own asset's data, so lineage runs source -> pipeline -> table).
Materialising a date range — Dagster's backfill dialog — launches one run
(``BackfillPolicy.single_run``) that recomputes those dates on Spark with dagster-pyspark's
``LazyPySparkResource`` (``batch.replay``: one Delta ``replaceWhere`` commit).
"""

import datetime as dt
import time
import warnings

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    BackfillPolicy,
    DailyPartitionsDefinition,
    MaterializeResult,
    MetadataValue,
    asset,
)
from dagster._utils.warnings import BetaWarning
from dagster_pyspark import LazyPySparkResource

from fennel_dagster.batch.replay import replay
from fennel_dagster.commit.catalog import BranchCatalog, asset_path, dataset_deps
from fennel_dagster.metadata.db import connect
from fennel_dagster.metadata.registry import branch_jobs
from fennel_dagster.wire import spec
from resources import FennelSettings

EARLIEST = dt.date(2000, 1, 1)  # Dagster lists every date: no history before this one


def offline_key(branch: str, dataset: str) -> AssetKey:
    path = asset_path(branch, dataset)
    return AssetKey([path[0], "offline", path[1]])


def partitions_of(ds: spec.DatasetSpec, today: dt.date) -> DailyPartitionsDefinition:
    """Event dates from ``history`` ago (at most back to 2000) to today, UTC."""
    start = max(EARLIEST, today - dt.timedelta(seconds=ds.history))
    return DailyPartitionsDefinition(start_date=start.isoformat(), end_offset=1)


def offline_assets(cat: BranchCatalog, today: dt.date | None = None) -> list[AssetsDefinition]:
    graph = cat.graph
    if graph is None:
        return []
    day = today or dt.datetime.now(dt.UTC).date()
    by_name = {d.name: d for d in graph.datasets if not d.meta.deleted}
    return [
        _offline_asset(cat.branch, ds, by_name, day)
        for ds in by_name.values()
        if ds.pipelines and ds.offline
    ]


def _offline_asset(
    branch: str, ds: spec.DatasetSpec, datasets: dict[str, spec.DatasetSpec], today: dt.date
) -> AssetsDefinition:
    deps = [AssetKey(asset_path(branch, ds.name))]
    for name in dataset_deps(ds):
        up = datasets.get(name)
        derived = up is not None and up.pipelines and up.offline
        deps.append(offline_key(branch, name) if derived else AssetKey(asset_path(branch, name)))
    name = ds.name

    # a single-run backfill policy is what makes a date range one Spark replay; Dagster marks
    # the parameter beta, and the warning would greet every user on each code-location load
    # (silenced here, where it is raised, whatever filters the caller has in place)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*backfill_policy.*", category=BetaWarning)
        offline_asset = asset(
            key=offline_key(branch, name),
            deps=deps,
            partitions_def=partitions_of(ds, today),
            backfill_policy=BackfillPolicy.single_run(),
            group_name=f"offline_{asset_path(branch, name)[0]}",
            kinds={"spark", "delta"},
            description=f"{name}'s offline table (Delta, by event date): materialise a date "
            "range to recompute it on Spark from its inputs' tables",
            tags={"fennel/entity": "offline-table"},
        )

    @offline_asset
    def offline_table(
        context: AssetExecutionContext, fennel: FennelSettings, pyspark: LazyPySparkResource
    ) -> MaterializeResult:
        settings = fennel.settings()
        window = context.partition_time_window
        since, until = window.start.date(), window.end.date()
        with connect(settings, settings.pg_schema) as conn:
            jobs = branch_jobs(conn, branch)
        t0 = time.monotonic()
        report = replay(pyspark.spark_session, settings, jobs, name, since, until,
                        on_progress=lambda p: context.log.info(p.bar()))  # fmt: skip
        return MaterializeResult(
            metadata={
                "rows": report.rows,
                "files": report.files,
                "bytes": report.bytes,
                "dates": f"{since} .. {until - dt.timedelta(days=1)}",
                "duration s": round(time.monotonic() - t0, 2),
                "delta version": report.table_version if report.table_version is not None else -1,
                "spark stages": MetadataValue.md("\n".join(f"- {s}" for s in report.stages)),
                "branch": branch,
                "table": MetadataValue.path(report.table_uri),
            }
        )

    return offline_table
