"""The two-ledger commit: atomic asset changes over Kafka, S3 and Postgres (seed 000).

1. Under the branch's advisory lock, recover whatever an earlier commit left (``janitor``).
2. Diff the desired blueprints against the branch's references and the bank.
3. Creation ledger: in one transaction, record the intent to create every new asset (and
   claim it in the bank as ``creating``); commit that *before* touching Kafka or S3.
4. Create each asset (idempotent, retried with backoff).
5. Commit point, one transaction: branch head, references, bank states, job registry,
   creation ledger closed, destruction ledger written for assets whose count reached zero.
6. Carry out the destructions, then close them.

A crash before 5 leaves only ledgered creations, which recovery destroys; a crash after 5
leaves only ledgered destructions, which recovery finishes. Nothing referenced by the old
graph is destroyed before 5 commits, and a commit either lands whole or not at all.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg

from fennel_dagster.commit import bank, janitor
from fennel_dagster.commit.blueprint import Blueprint, BlueprintDiff, BlueprintSet
from fennel_dagster.commit.compiler import job_of
from fennel_dagster.commit.crashpoints import crash_point
from fennel_dagster.commit.errors import branch_not_synced, raise_for_backfill
from fennel_dagster.commit.physical import PhysicalAssets
from fennel_dagster.commit.preview import diff
from fennel_dagster.errors import CommitError
from fennel_dagster.metadata import assets, commits, ledgers, locks, registry
from fennel_dagster.wire.plan import PipelineJobSpec


class StaleBranchError(CommitError, RuntimeError):
    """The branch moved since the commit was prepared."""


class MetadataUnavailableError(CommitError, RuntimeError):
    """The metadata store went away mid-commit; recovery will undo whatever was started."""


Prepare = Callable[[BlueprintDiff, str], None]


def refuse_backfill(plan: BlueprintDiff) -> None:
    """``commit(backfill=False)``: Fennel's guard against an accidental backfill."""
    new = [
        f"{job.dataset.name}.{job.pipeline.name}"
        for job in (job_of(bp) for bp in plan.create if bp.kind == "job")
        if isinstance(job, PipelineJobSpec)
    ]
    raise_for_backfill(new)


@dataclass
class CommitOutcome:
    branch: str
    commit_id: int
    diff: BlueprintDiff
    durations: dict[str, float] = field(default_factory=dict)


def head(conn: psycopg.Connection, branch: str) -> int | None:
    found = commits.get_branch(conn, branch)
    if found is None:
        raise branch_not_synced(branch, commits.list_branches(conn))
    return found.head


def commit(
    conn: psycopg.Connection,
    lock_conn: psycopg.Connection,
    physical: PhysicalAssets,
    branch: str,
    desired: BlueprintSet,
    wire: bytes,
    message: str,
    author: str = "fennel",
    expected_head: int | None | str = "any",
    backfill: bool = True,
    before_commit_point: Prepare | None = None,
) -> CommitOutcome:
    """Commit ``desired`` as the branch's new graph. ``conn`` does the work; ``lock_conn`` (an
    autocommit connection) holds the branch's session lock, which dies with us if we crash.

    ``before_commit_point(diff, attempt)`` runs once the new assets exist and before the
    commit point (the backfill of new pipelines: the old graph serves until it is done; if it
    fails, the commit is rolled back). ``backfill=False`` refuses a commit that creates a
    pipeline job."""
    t0 = time.monotonic()
    times: dict[str, float] = {}
    locks.lock_branch(lock_conn, branch)
    try:
        return _commit_locked(
            conn,
            lock_conn,
            physical,
            branch,
            desired,
            wire,
            message,
            author,
            expected_head,
            t0,
            times,
            backfill,
            before_commit_point,
        )
    except (psycopg.OperationalError, psycopg.InterfaceError) as e:
        raise MetadataUnavailableError(
            f"lost the connection to the metadata store while committing to {branch!r} "
            f"({str(e).strip()}). The commit is unfinished: assets it created may exist, and "
            "the branch shows either the previous commit or this one, whole, never a mix. "
            "Recovery settles it (rolls back what did not reach the commit point, finishes what "
            "did): run LocalClient.recover() once the store is back, or commit again (which "
            "recovers first)"
        ) from e
    finally:
        # the session lock dies with its session: a lost connection needs no unlock, and an
        # error here must not hide the message above
        with contextlib.suppress(psycopg.Error):
            if not lock_conn.closed:
                locks.unlock_branch(lock_conn, branch)


def _commit_locked(
    conn: psycopg.Connection, lock_conn: psycopg.Connection, physical: PhysicalAssets, branch: str,
    desired: BlueprintSet, wire: bytes, message: str, author: str, expected_head: int | None | str,
    t0: float, times: dict[str, float], backfill: bool, before_commit_point: Prepare | None,
) -> CommitOutcome:  # fmt: skip
    janitor.recover(conn, lock_conn, physical, own_branch=branch)
    crash_point("after_recovery")
    times["recovery"] = time.monotonic() - t0
    with conn.transaction():
        base = head(conn, branch)
        if expected_head != "any" and base != expected_head:
            raise StaleBranchError(
                f"branch {branch!r} moved to commit {base} since this commit was prepared "
                f"against {expected_head}: re-read the branch and commit again"
            )
        plan = diff(desired, bank.branch_refs(conn, branch), bank.live_hashes(conn))
    if not backfill:
        refuse_backfill(plan)
    attempt = str(uuid.uuid4())
    with conn.transaction():
        commits.open_attempt(conn, attempt, branch, base)
        for bp in plan.create:
            if not bank.insert_creating(conn, bp, attempt):
                raise RuntimeError(f"asset {bp.name} appeared in the bank during the commit; retry")
            ledgers.record_creation_intent(conn, attempt, bp.hash)
    crash_point("after_creation_intent")
    t1 = time.monotonic()
    for bp in plan.create:
        crash_point("before_create_asset")
        physical.create(bp)
        crash_point("after_create_asset")
    times["create"] = time.monotonic() - t1
    if before_commit_point is not None:
        t3 = time.monotonic()
        before_commit_point(plan, attempt)
        times["backfill"] = time.monotonic() - t3
    crash_point("before_commit_point")
    commit_id = _commit_point(conn, branch, base, attempt, plan, desired, wire, message, author)
    crash_point("after_commit_point")
    t2 = time.monotonic()
    janitor.carry_out_destructions(conn, physical)
    crash_point("after_destructions")
    times["destroy"] = time.monotonic() - t2
    times["total"] = time.monotonic() - t0
    return CommitOutcome(branch, commit_id, plan, times)


def _commit_point(
    conn: psycopg.Connection, branch: str, base: int | None, attempt: str, plan: BlueprintDiff,
    desired: BlueprintSet, wire: bytes, message: str, author: str,
) -> int:  # fmt: skip
    with conn.transaction():
        current = commits.get_branch_for_update(conn, branch)
        if current is None or current.head != base:
            raise StaleBranchError(f"branch {branch!r} moved during the commit: commit again")
        hashes = sorted(b.hash for b in desired.blueprints)
        commit_id = commits.insert_commit(conn, branch, base, message, author, wire, hashes)
        commits.set_head(conn, branch, commit_id)
        created = [b.hash for b in plan.create]
        assets.mark_live(conn, created)
        for bp in plan.create + plan.reuse:
            assets.add_ref(conn, branch, bp.hash)
            if bp.kind == "job":
                registry.register_job(conn, bp.hash, job_of(bp))
        released = [b.hash for b in plan.release]
        assets.release_refs(conn, branch, released)
        schedule_unreferenced(conn, released, commit_id)
        ledgers.commit_creations(conn, attempt)
        commits.mark_attempt_committed(conn, attempt)
    return commit_id


def schedule_unreferenced(
    conn: psycopg.Connection, hashes: list[str], commit_id: int | None
) -> None:
    """Inside a commit-point transaction: ledger the destruction of assets nobody references."""
    counts = bank.ref_counts(conn, hashes)
    orphans = [h for h in hashes if counts.get(h, 0) == 0]
    if not orphans:
        return
    assets.mark_destroying(conn, orphans)
    registry.unregister_jobs(conn, orphans)
    ledgers.schedule_destruction(conn, commit_id, orphans)


__all__ = ["Blueprint", "CommitOutcome", "StaleBranchError", "commit", "head"]
