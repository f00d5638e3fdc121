"""What Spark can read of a branch: each dataset's offline table, and how its lookups are
answered (a version index, or a continuous aggregate assembled as of a time from its input
events), from the branch's compiled jobs: the same plan the engine runs."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from fennel_dagster.errors import ExecutionError
from fennel_dagster.offline.table import DAY, OfflineTable
from fennel_dagster.ops.index import DELETED
from fennel_dagster.settings import Settings
from fennel_dagster.wire import plan, spec


class NoOfflineTable(ExecutionError, LookupError):
    """A dataset Spark needs has no offline table (``offline=False``, or not on the branch)."""


class OfflineCatalog:
    def __init__(self, settings: Settings, jobs: Iterable[plan.JobSpec]) -> None:
        self.settings = settings
        self.tables: dict[str, plan.OfflineTable] = {}
        self.serving: dict[str, tuple[plan.PipelineJobSpec, plan.AggregateServing]] = {}
        self.datasets: dict[str, spec.DatasetSpec] = {}
        for job in jobs:
            match job:
                case plan.OfflineJobSpec(table=table):
                    self.tables[table.dataset.name] = table
                    self.datasets[table.dataset.name] = table.dataset
                case plan.PipelineJobSpec(serves=serves) if serves is not None:
                    self.serving[job.dataset.name] = (job, serves)
            if hasattr(job, "dataset"):
                self.datasets.setdefault(job.dataset.name, job.dataset)

    def table(self, name: str, needed_by: str) -> OfflineTable:
        if name not in self.tables:
            known = ", ".join(sorted(self.tables)) or "none"
            raise NoOfflineTable(
                f"{needed_by} needs dataset {name}'s history, but {name} has no offline table "
                f"on this branch (offline datasets: {known}); declare it with offline=True"
            )
        return OfflineTable(self.settings, self.tables[name])

    def read(self, spark: Any, name: str, needed_by: str, until: dt.date | None = None) -> Any:
        """The dataset's rows (and a keyed dataset's tombstones) with event dates before
        ``until``: partitions after it are never listed (Delta prunes by ``__day``)."""
        from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention

        table = self.table(name, needed_by)
        ds = table.dataset
        keep = [f.name for f in ds.fields] + ([DELETED] if ds.keys else [])
        if not table.exists():  # committed, nothing written yet: no rows
            from fennel_dagster.batch.pipeline import spark_schema

            schema = spark_schema(ds.fields)
            df = spark.createDataFrame([], schema)
            return df.withColumn(DELETED, F.lit(False)) if ds.keys else df
        df = spark.read.format("delta").load(table.spark_path)
        if until is not None:
            df = df.where(F.col(DAY) < until.isoformat())
        return df.select(*keep)
