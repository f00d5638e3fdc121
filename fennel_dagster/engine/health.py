"""Stream health of each branch's datasets, from what the runners report (``stream_stats``).

Rows written, bad rows, the writers' and the index's input lag, the newest event time, and
the partitions that stopped for good. Reading it costs a few Postgres queries, whatever the
number of partitions, so the Dagster sensor and the demo's status can ask every few seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg

from fennel_dagster.metadata import registry, stream_stats
from fennel_dagster.metadata.registry import JobRow

REPORTING_WITHIN_S = 10.0  # runners report every ~2 s; older than this: not running


@dataclass(frozen=True)
class DatasetHealth:
    branch: str
    dataset: str
    rows: int  # rows its writer jobs (source, pipelines) wrote to its topic
    bad_rows: int  # rows they sent to its error topic
    lag: int | None  # input messages its writers have not processed (None: unknown, as long
    # as any writer partition has not reported a measured lag: one that has not fetched yet)
    index_lag: int | None  # its rows not yet in its index (None: no index, or unknown)
    newest_event: datetime | None  # the newest event time written
    partitions: int  # job partitions that write or index it
    running: int  # of those, how many reported within REPORTING_WITHIN_S
    stopped: tuple[str, ...]  # "<job> p<k>: <reason>" of any of its jobs' partitions (its
    # writers', index's, offline table's and sinks') stopped for good
    caught_up: bool  # every writer and index partition reported lately, each a lag of 0
    # measured (an unknown lag, one not reported, or a stale report: not caught up)


def _sum(values: list[int | None]) -> int | None:
    """The total lag of some partitions; unknown if any one's is (or there are none)."""
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


def stream_health(conn: psycopg.Connection) -> list[DatasetHealth]:
    by_branch = registry.jobs_by_branch(conn)
    stats = stream_stats.all_stats(conn)
    failed = registry.failures(conn)
    out = []
    for branch, jobs in sorted(by_branch.items()):
        by_dataset: dict[str, list[JobRow]] = {}
        every: dict[str, list[JobRow]] = {}  # its offline table and sinks too
        for j in jobs:
            every.setdefault(j.spec.dataset.name, []).append(j)
            if j.kind in ("source", "pipeline", "index"):
                by_dataset.setdefault(j.spec.dataset.name, []).append(j)
        for name, mine in sorted(by_dataset.items()):
            parts = [(j, p, stats.get((j.hash, p))) for j in mine for p in range(j.partitions)]
            writers = [(j, s) for j, _, s in parts if j.kind != "index"]
            index = [s for j, _, s in parts if j.kind == "index"]
            newest = [s.newest_event for _, s in writers if s is not None and s.newest_event]
            out.append(DatasetHealth(
                branch, name,
                rows=sum(s.rows_out for _, s in writers if s is not None),
                bad_rows=sum(s.bad_rows for _, s in writers if s is not None),
                lag=_sum([None if s is None else s.lag for _, s in writers]),
                index_lag=_sum([None if s is None else s.lag for s in index]),
                newest_event=max(newest) if newest else None,
                partitions=len(parts),
                running=sum(1 for _, _, s in parts
                            if s is not None and s.age_s < REPORTING_WITHIN_S),
                stopped=tuple(f"{j.name} p{p}: {failed[(j.hash, p)].reason}"
                              for j in every[name] for p in range(j.partitions)
                              if (j.hash, p) in failed),
                caught_up=all(s is not None and s.lag == 0 and s.age_s < REPORTING_WITHIN_S
                              for _, _, s in parts),
            ))  # fmt: skip
    return out
