"""Recovery: finish or roll back whatever interrupted commits left behind.

- An ``open`` commit attempt whose branch lock nobody holds died before its commit point:
  every asset it was creating is destroyed (they are referenced by no branch) and forgotten.
- A ``pending`` destruction was decided at a commit point: it is carried out.
Runs at the start of every commit and on demand; every step is idempotent.
"""

from __future__ import annotations

import psycopg

from fennel_dagster.commit import bank
from fennel_dagster.commit.crashpoints import crash_point
from fennel_dagster.commit.physical import PhysicalAssets
from fennel_dagster.metadata import assets, commits, ledgers, locks


def recover(
    conn: psycopg.Connection,
    lock_conn: psycopg.Connection,
    physical: PhysicalAssets,
    own_branch: str | None = None,
    wait: float = 0.0,
) -> dict[str, int]:
    """``wait``: seconds to wait for a branch lock held by a session that may be dying (the
    backend of a killed committer lingers briefly); 0 skips branches with a live commit."""
    rolled_back = 0
    attempts = commits.open_attempts(conn)
    conn.commit()
    for a in attempts:
        held_by_us = a.branch == own_branch
        if not held_by_us:
            if not locks.try_lock_branch(lock_conn, a.branch, wait):
                continue  # a live commit owns this branch right now
        try:
            rolled_back += _roll_back(conn, physical, a.attempt)
        finally:
            if not held_by_us:
                locks.unlock_branch(lock_conn, a.branch)
    destroyed = carry_out_destructions(conn, physical)
    return {"rolled_back": rolled_back, "destroyed": destroyed}


def _roll_back(conn: psycopg.Connection, physical: PhysicalAssets, attempt: str) -> int:
    with conn.transaction():
        strays = [bank.blueprint_of(r) for r in assets.creating_by(conn, attempt)]
    for bp in strays:
        physical.destroy(bp)
    with conn.transaction():
        ledgers.roll_back_creations(conn, attempt)
        assets.forget_creating(conn, attempt)
        commits.mark_attempt_aborted(conn, attempt)
    return len(strays)


def carry_out_destructions(conn: psycopg.Connection, physical: PhysicalAssets) -> int:
    with conn.transaction():
        pending = ledgers.pending_destructions(conn)
    done = 0
    for entry in pending:
        bp = bank.blueprint_of(entry.asset)
        crash_point("before_destroy_asset")
        physical.destroy(bp)
        crash_point("after_destroy_asset")
        with conn.transaction():
            ledgers.mark_destruction_done(conn, entry.id)
            assets.mark_destroyed(conn, bp.hash)
        done += 1
    return done
