"""Replay: recompute a derived dataset's offline table (or a range of its event dates) on
Spark from its inputs' offline tables, with the same operators the engine runs.

Stateful operators need all history before the range (a window, a first(), a dedup reaches
back), so the pipeline runs over every input row before ``until`` and only the output rows
inside ``[since, until)`` are kept. They replace that range of the table in one Delta commit
(``replaceWhere``): a reader sees the old rows or the new ones, never a mix. The offline writer
keeps appending what the stream emits after the replay; rows the stream had already written
for the range are replaced by the recomputation.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fennel_dagster.batch.pipeline import SparkPipeline
from fennel_dagster.batch.progress import Progress, watch
from fennel_dagster.errors import ExecutionError
from fennel_dagster.metadata.registry import JobRow
from fennel_dagster.offline.table import DAY, META_COLUMNS, OFFSET, PARTITION, OfflineTable
from fennel_dagster.ops.index import DELETED
from fennel_dagster.settings import Settings
from fennel_dagster.wire import plan


class ReplayError(ExecutionError):
    """A replay that cannot run (an unknown dataset, a source dataset, a missing input table)."""


@dataclass(frozen=True)
class ReplayReport:
    dataset: str
    rows: int
    since: dt.date | None
    until: dt.date | None
    seconds: float
    table_version: int | None
    table_uri: str = ""
    files: int = 0  # data files of the range after the replay
    bytes: int = 0
    stages: tuple[str, ...] = ()  # "<stage name>: <tasks> tasks", one per Spark stage run


def replay(
    spark: Any,
    settings: Settings,
    jobs: list[JobRow],
    dataset: str,
    since: dt.date | None = None,
    until: dt.date | None = None,
    on_progress: Callable[[Progress], None] | None = None,
) -> ReplayReport:
    """Recompute ``dataset``'s offline rows with event dates in ``[since, until)`` (open ends:
    all of them) from ``jobs`` (a branch's committed jobs)."""
    from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention

    tables = {
        j.spec.dataset.name: j.spec.table for j in jobs if isinstance(j.spec, plan.OfflineJobSpec)
    }
    pipes = [j.spec for j in jobs if isinstance(j.spec, plan.PipelineJobSpec)
             and j.spec.dataset.name == dataset]  # fmt: skip
    if dataset not in tables:
        known = ", ".join(sorted(tables)) or "none"
        raise ReplayError(f"{dataset}: no offline table on this branch (offline datasets: {known})")
    if not pipes:
        raise ReplayError(
            f"{dataset} has no pipeline: it is a source dataset, whose offline table is its "
            "topic's content; replay a dataset derived from it instead"
        )
    started = time.monotonic()
    outputs = []
    for job in pipes:
        datasets = {s.dataset.name: s.dataset for s in (*job.inputs, *job.lookups)}
        datasets[dataset] = job.dataset
        frames = {}
        for name, ds in datasets.items():
            if name == dataset:
                continue
            if name not in tables:
                raise ReplayError(
                    f"{dataset}: its input {name} has no offline table (offline=False)"
                )
            df = spark.read.format("delta").load(OfflineTable(settings, tables[name]).spark_path)
            if until is not None:
                df = df.where(F.col(DAY) < until.isoformat())
            keep = [f.name for f in ds.fields] + ([DELETED] if ds.keys else [])
            frames[name] = df.select(*keep)
        outputs.append(SparkPipeline(job.pipeline, datasets).run(frames))
    out = outputs[0]
    for other in outputs[1:]:
        out = out.unionByName(other)
    target = OfflineTable(settings, tables[dataset])
    ts = target.dataset.timestamp
    out = out.withColumn(DAY, F.date_format(F.col(ts), "yyyy-MM-dd"))
    out = (out.withColumn(DELETED, F.lit(False))
              .withColumn(PARTITION, F.lit(None).cast("int"))
              .withColumn(OFFSET, F.lit(None).cast("long")))  # fmt: skip
    window = []
    if since is not None:
        window.append(f"{DAY} >= '{since.isoformat()}'")
    if until is not None:
        window.append(f"{DAY} < '{until.isoformat()}'")
    condition = " AND ".join(window) or "true"
    out = out.where(condition).select(*[f.name for f in target.dataset.fields], *META_COLUMNS)
    watcher = watch(spark, on_progress, started) if on_progress else None
    group = f"replay-{dataset}-{time.time_ns()}"
    spark.sparkContext.setJobGroup(group, f"replay {dataset} {since} .. {until}")
    try:
        out.cache()
        rows = out.count()
        writer = out.write.format("delta").mode("overwrite").option("replaceWhere", condition)
        writer.partitionBy(DAY).save(target.spark_path)
        out.unpersist()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
        if watcher is not None:
            watcher.set()
    files, size = target.files_between(since, until)
    return ReplayReport(dataset, rows, since, until, time.monotonic() - started, target.version(),
                        target.uri, files, size, _stages(spark, group))  # fmt: skip


def _stages(spark: Any, group: str) -> tuple[str, ...]:
    tracker = spark.sparkContext.statusTracker()
    out = []
    for job in sorted(tracker.getJobIdsForGroup(group)):
        info = tracker.getJobInfo(job)
        for stage in [] if info is None else sorted(info.stageIds):
            st = tracker.getStageInfo(stage)
            if st is not None:
                out.append(f"{st.name.split(' at ')[0]}: {st.numTasks} tasks")
    return tuple(out)
