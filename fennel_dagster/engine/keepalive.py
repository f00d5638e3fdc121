"""Keep one live runner per job partition, judged by the runners' own heartbeats.

Pure decisions for whoever launches runners as separate runs (the Dagster engine sensor):
given the job registry, the runs that claim to be alive and the runners' heartbeats,
say which partitions to add or remove, which runs are dead (to be marked failed), which to
stop, and which partitions need a new run. A run's process can die without its launcher
noticing (SIGKILL, OOM), so liveness is the heartbeat the runner writes every ~2 s.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from fennel_dagster.metadata.registry import JobRow

DEAD_AFTER_S = 6.0  # no heartbeat for this long: the runner is gone
STARTUP_GRACE_S = 90.0  # a new run may take this long to write its first heartbeat


def partition_key(job: JobRow, partition: int) -> str:
    return f"{job.name}:{partition}"


def split_key(key: str) -> tuple[str, int]:
    name, _, p = key.rpartition(":")
    return name, int(p)


@dataclass(frozen=True)
class LiveRun:
    run_id: str
    partition_key: str
    started_age_s: float  # seconds since the run started (or was queued)
    started: bool  # False while queued/starting


@dataclass
class Plan:
    add_partitions: list[str] = field(default_factory=list)
    delete_partitions: list[str] = field(default_factory=list)
    launch: list[str] = field(default_factory=list)
    mark_failed: list[str] = field(default_factory=list)  # run ids
    terminate: list[str] = field(default_factory=list)  # run ids of removed partitions


def plan(
    jobs: Iterable[JobRow],
    existing_partitions: Iterable[str],
    runs: Iterable[LiveRun],
    heartbeats: Mapping[tuple[str, int], tuple[str, float]],
    owner_of_run: str = "run:{run_id}",
    failed: Collection[tuple[str, int]] = (),
) -> Plan:
    """``heartbeats``: (job hash, partition) -> (owner, seconds since its heartbeat);
    ``failed``: (job hash, partition) that stopped for good: never relaunched."""
    by_key = {partition_key(j, p): (j, p) for j in jobs for p in range(j.partitions)}
    existing = set(existing_partitions)
    out = Plan(
        add_partitions=sorted(set(by_key) - existing),
        delete_partitions=sorted(existing - set(by_key)),
    )
    alive: set[str] = set()
    for run in runs:
        if run.partition_key not in by_key:
            out.terminate.append(run.run_id)
            continue
        job, p = by_key[run.partition_key]
        owner, age = heartbeats.get((job.hash, p), ("", float("inf")))
        beating = owner == owner_of_run.format(run_id=run.run_id) and age < DEAD_AFTER_S
        if (
            beating
            or run.started_age_s < STARTUP_GRACE_S
            and not (owner == owner_of_run.format(run_id=run.run_id) and age >= DEAD_AFTER_S)
        ):
            if run.partition_key in alive:
                out.terminate.append(run.run_id)  # a duplicate: fencing keeps it harmless
            else:
                alive.add(run.partition_key)
            continue
        out.mark_failed.append(run.run_id)
    stopped = set(failed)
    out.launch = sorted(
        k for k, (j, p) in by_key.items() if k not in alive and (j.hash, p) not in stopped
    )
    return out
