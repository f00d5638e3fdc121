"""Point-in-time lookups of a dataset from the state of the job partition that owns the key.

A keyed dataset is looked up in its index job's state (as-of its rows). A dataset whose
pipeline ends in a continuous-window aggregation is looked up in that pipeline job's state:
its windows are assembled at the lookup's timestamp, so a 7-day sum decays between events
(the mock client answers the same way).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import psycopg

from fennel_dagster.engine.jobs.common import dataset_of
from fennel_dagster.engine.partitioning import key_bytes, partition_for
from fennel_dagster.engine.registry import JobRow, list_jobs
from fennel_dagster.ops import aggregate, index
from fennel_dagster.ops.rows import to_records
from fennel_dagster.ops.state import StateReader
from fennel_dagster.wire import spec
from fennel_dagster.wire.codec import from_jsonable


class LookupError_(LookupError):
    """A lookup that cannot be served: names the dataset and what to do."""


def terminal_aggregate(job: JobRow) -> tuple[str, spec.AggregateNode] | None:
    """(scope, node) if ``job`` is a pipeline job ending in a continuous aggregation."""
    if job.kind != "pipeline":
        return None
    p: spec.PipelineSpec = from_jsonable(job.spec["pipeline"])
    last = {n.id: n for n in p.nodes}[p.output]
    if isinstance(last, spec.AggregateNode) and aggregate.is_continuous(last):
        return f"{p.dataset}.{p.name}", last
    return None


def serving_job(jobs: Sequence[JobRow], dataset: str) -> JobRow:
    """The job whose state answers lookups of ``dataset`` (among one branch's jobs)."""
    mine = [j for j in jobs if dataset_of(j.spec["dataset"]).name == dataset]
    for j in mine:
        if terminal_aggregate(j) is not None:
            return j
    for j in mine:
        if j.kind == "index":
            return j
    raise LookupError_(
        f"dataset {dataset} cannot be looked up: it has no index; declare it "
        "@dataset(index=True) with key fields, and commit"
    )


def branch_jobs(conn: psycopg.Connection, branch: str) -> list[JobRow]:
    hashes = {
        h for (h,) in conn.execute("SELECT hash FROM refs WHERE branch = %s", (branch,)).fetchall()
    }
    return [j for j in list_jobs(conn) if j.hash in hashes]


def partitions_of(job: JobRow, keys: pd.DataFrame) -> list[int]:
    ds = dataset_of(job.spec["dataset"])
    rows = to_records(keys, list(ds.keys))
    return [partition_for(key_bytes([r[k] for k in ds.keys]), job.partitions) for r in rows]


def answer(
    state: StateReader,
    job: JobRow,
    keys: pd.DataFrame,
    ts: pd.Series,
    fields: list[str] | None = None,
) -> tuple[pd.DataFrame, pd.Series]:
    ds = dataset_of(job.spec["dataset"])
    missing = [k for k in ds.keys if k not in keys.columns]
    if missing:
        raise LookupError_(
            f"lookup of {ds.name} needs its key field(s) {', '.join(ds.keys)}; "
            f"the keys frame is missing {', '.join(missing)}"
        )
    keys = keys[list(ds.keys)].reset_index(drop=True)
    ts = pd.to_datetime(pd.Series(ts), utc=True).reset_index(drop=True)
    term = terminal_aggregate(job)
    if term is None:
        return index.lookup(state, ds, keys, ts, fields)
    scope, node = term
    values, found = aggregate.lookup_aggregate(state, scope, node, keys, ts)
    out = keys.copy()
    for c in values.columns:
        out[c] = values[c]
    out[ds.timestamp] = ts.to_numpy()
    wanted = [f.name for f in ds.fields if fields is None or f.name in fields]
    return out[wanted], found
