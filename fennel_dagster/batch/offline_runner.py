"""Carrying out one offline query request: claim it, read its input, run the query on Spark,
write its output, and keep its row in Postgres current (progress every half second, and the
outcome); a cancel asked for meanwhile stops its Spark jobs.

The same function runs inside a Dagster run (``assets/offline_queries.py``, on the run's
dagster-pyspark session) and in a client's own process (``LocalClient`` without Dagster).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from fennel_dagster.batch.catalog import OfflineCatalog
from fennel_dagster.batch.offline_query import OfflineQuery, SparkOfflineQuery
from fennel_dagster.batch.progress import Progress, watch
from fennel_dagster.commit import branches
from fennel_dagster.errors import FennelError
from fennel_dagster.metadata import offline_queries, registry
from fennel_dagster.metadata.db import connect
from fennel_dagster.metadata.offline_queries import OfflineQueryStatus
from fennel_dagster.offline.exchange import spark_uri
from fennel_dagster.settings import Settings


class OfflineInputError(FennelError, ValueError):
    """The request's input cannot be read: names the input and the fix."""


def execute(
    spark: Any,
    settings: Settings,
    request_id: int,
    run_id: str,
    log: Callable[[str], None] = lambda line: None,
) -> OfflineQueryStatus | None:
    """Run request ``request_id`` to its end (done, failed or cancelled); None if it was not
    pending (another run has it, or it was cancelled first)."""
    with connect(settings, settings.pg_schema) as conn:
        claimed = offline_queries.claim(conn, request_id, run_id)
        if claimed is None:
            return None
        graph = branches.checkout(conn, claimed.branch)
        jobs = registry.branch_jobs(conn, claimed.branch)
    req = claimed.request
    started = time.monotonic()
    group = f"offline-query-{request_id}"
    cancelled = False
    step = ["reading input"]

    def report(p: Progress) -> None:
        nonlocal cancelled
        progress = {**asdict(p), "eta_s": p.eta_s, "step": step[0]}
        with connect(settings, settings.pg_schema) as c:
            if offline_queries.report_progress(c, request_id, progress) and not cancelled:
                cancelled = True
                log(f"offline query {request_id}: cancel asked, stopping its Spark jobs")
                spark.sparkContext.cancelJobGroup(group)

    state: offline_queries.State = "done"
    result: dict[str, Any]
    spark.sparkContext.setJobGroup(group, f"offline query {request_id}", True)
    watcher = watch(spark, report, started)
    try:
        if graph is None:
            raise OfflineInputError(f"branch {claimed.branch!r} has no commit yet; commit first")
        oq = SparkOfflineQuery(spark, OfflineCatalog(settings, [j.spec for j in jobs]),
                               graph.featuresets)  # fmt: skip
        spine = _read_input(spark, req.input_uri, req.input_format)
        q = OfflineQuery(req.inputs, req.outputs, req.timestamp_column,
                         dict(req.feature_to_column_map))  # fmt: skip
        step[0] = "computing features"
        log(f"offline query {request_id}: {len(req.outputs)} outputs for {req.input_uri}")
        out = oq.run(q, spine)
        step[0] = "writing output"
        out.write.mode("overwrite").format(req.output_format).save(spark_uri(req.output_uri))
        rows = spark.read.format(req.output_format).load(spark_uri(req.output_uri)).count()
        result = {"output_uri": req.output_uri, "rows": rows,
                  "seconds": round(time.monotonic() - started, 3)}  # fmt: skip
        log(f"offline query {request_id}: {rows} rows to {req.output_uri}")
    except Exception as e:  # every failure is recorded for the waiting client, then raised
        state = "cancelled" if cancelled else "failed"
        result = {"error": "cancelled" if cancelled else _message(e),
                  "seconds": round(time.monotonic() - started, 3)}  # fmt: skip
        if not cancelled and not isinstance(e, FennelError):
            log(f"offline query {request_id} failed: {result['error']}")
    finally:
        watcher.set()
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    with connect(settings, settings.pg_schema) as conn:
        offline_queries.finish(conn, request_id, state, result)
        return offline_queries.status(conn, request_id)


def _read_input(spark: Any, uri: str, fmt: str) -> Any:
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", "true").option("inferSchema", "true")
    try:
        return reader.load(spark_uri(uri))
    except Exception as e:
        if "PATH_NOT_FOUND" in str(e) or "does not exist" in str(e):
            raise OfflineInputError(
                f"the offline query's input {uri} does not exist: pass input_s3= naming "
                f"{fmt} files the platform's S3 credentials can read"
            ) from e
        raise


def _message(e: BaseException) -> str:
    """The user's error: ours as it is, a Python error raised in a Spark task as its last
    line (the worker's traceback is in the run's log), others as Spark states them."""
    if isinstance(e, FennelError):
        return f"{type(e).__name__}: {e}"
    text = str(e)
    if "Traceback" in text:
        lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith(" ")]
        picked = [ln for ln in lines if "Error:" in ln and "fennel_dagster" in ln]
        return (picked or lines)[-1].strip()
    return text.splitlines()[0] if text else type(e).__name__
