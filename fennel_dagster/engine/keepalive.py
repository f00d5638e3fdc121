"""Keep one live runner per job partition, judged by the runners' own heartbeats.

Pure decisions for whoever launches runners as separate runs (the Dagster engine sensor):
given the job registry, the runs that claim to be alive and the runners' heartbeats,
say which partitions to add or remove, which runs are dead (to be marked failed), which to
stop, and which partitions need a new run. A run's process can die without its launcher
noticing (SIGKILL, OOM), so liveness is the heartbeat the runner writes every ~2 s (from a
thread while it starts or runs a long batch: ``runner.beating_beside_loop``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from fennel_dagster.metadata.registry import JobRow

# the Dagster job that runs one job partition, and the tags of its runs (sensors/engine.py)
ENGINE_JOB = "engine_partition_run"
PARTITION_TAG = "fennel/partition"  # the partition key, e.g. "UserSpend.agg/0"
SCHEMA_TAG = "fennel/schema"  # the platform's metadata schema: platforms may share Dagster
SLOT_TAG = "fennel/engine-slot"  # "<schema>/<key>": dagster.yaml allows one live run per slot

DEAD_AFTER_S = 15.0  # no heartbeat for this long: the runner is gone (beats every ~2 s;
# a slow batch on a busy host must not count as death)
STARTUP_GRACE_S = 90.0  # a new run may take this long to write its first heartbeat


def display_name(job: JobRow) -> str:
    """What a person reads: ``UserSpend.agg`` (dataset, pipeline), ``Txn.src0``,
    ``Merchant.index``, ``UserSpend.offline``; ``.v2`` after the dataset from version 2."""
    ds = job.spec.dataset
    base = ds.name if ds.version <= 1 else f"{ds.name}.v{ds.version}"
    role = job.name.rsplit(".", 2)[-2]  # the name's part before its hash: agg, src0, v1
    if job.kind in ("index", "offline"):
        role = job.kind
    elif job.kind in ("s3_ingest", "pg_ingest"):
        role = f"{role}.ingest"
    return f"{base}.{role}"


def partition_keys(jobs: Iterable[JobRow]) -> dict[str, tuple[JobRow, int]]:
    """Each job partition's Dagster partition key, ``<display name>/<partition>``. Two jobs
    that read the same (one definition on two branches) both carry their hash's head."""
    named: dict[str, list[JobRow]] = {}
    for j in jobs:
        named.setdefault(display_name(j), []).append(j)
    out: dict[str, tuple[JobRow, int]] = {}
    for name, same in named.items():
        for j in same:
            label = name if len(same) == 1 else f"{name}~{j.hash[:8]}"
            out.update({f"{label}/{p}": (j, p) for p in range(j.partitions)})
    return out


def partition_key(job: JobRow, partition: int, jobs: Iterable[JobRow] = ()) -> str:
    """``job``'s key among ``jobs`` (the registry; alone when not given)."""
    keys = partition_keys([job, *(j for j in jobs if j.hash != job.hash)])
    return next(k for k, (j, p) in keys.items() if j.hash == job.hash and p == partition)


# Jobs whose output answers lookups or feeds them start first; a platform's first start is
# tens of run processes on a few cores. Writers (offline tables, sinks) catch up from their
# topic, and history ingests are polls: nothing waits on them for freshness.
_SERVING: frozenset[str] = frozenset({"source", "pipeline", "index"})


def launch_priority(job: JobRow) -> int:
    """Dagster's ``dagster/priority`` for a job's run: the run queue starts higher first."""
    return 1 if job.kind in _SERVING else 0


@dataclass(frozen=True)
class LiveRun:
    run_id: str
    partition_key: str
    started_age_s: float  # seconds since its worker started (or since it was queued)
    started: bool  # False while queued/starting: no worker yet


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
    by_key = partition_keys(jobs)
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
        mine = owner == owner_of_run.format(run_id=run.run_id)
        beating = mine and age < DEAD_AFTER_S
        # a queued or starting run has no worker yet to beat: Dagster's own run monitoring
        # judges a start that hangs; judging it here failed runs still waiting in the queue
        waiting = not run.started
        young = run.started_age_s < STARTUP_GRACE_S and not (mine and age >= DEAD_AFTER_S)
        if beating or waiting or young:
            if run.partition_key in alive:
                out.terminate.append(run.run_id)  # a duplicate: fencing keeps it harmless
            else:
                alive.add(run.partition_key)
            continue
        out.mark_failed.append(run.run_id)
    stopped = set(failed)
    out.launch = sorted(
        (k for k, (j, p) in by_key.items() if k not in alive and (j.hash, p) not in stopped),
        key=lambda k: (-launch_priority(by_key[k][0]), k),
    )
    return out
