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
from fennel_dagster.metadata import locks


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
    attempts = conn.execute(
        "SELECT attempt::text, branch FROM commit_attempts WHERE state = 'open'"
    ).fetchall()
    conn.commit()
    for attempt, branch in attempts:
        held_by_us = branch == own_branch
        if not held_by_us:
            if not locks.try_lock_branch(lock_conn, branch, wait):
                continue  # a live commit owns this branch right now
        try:
            rolled_back += _roll_back(conn, physical, attempt)
        finally:
            if not held_by_us:
                locks.unlock_branch(lock_conn, branch)
    destroyed = carry_out_destructions(conn, physical)
    return {"rolled_back": rolled_back, "destroyed": destroyed}


def _roll_back(conn: psycopg.Connection, physical: PhysicalAssets, attempt: str) -> int:
    with conn.transaction():
        rows = conn.execute(
            "SELECT kind, name, hash, entity, spec FROM assets WHERE attempt = %s AND state = 'creating'",
            (attempt,),
        ).fetchall()
    strays = [bank.blueprint_of(r) for r in rows]
    for bp in strays:
        physical.destroy(bp)
    with conn.transaction():
        conn.execute(
            "UPDATE creation_ledger SET state = 'rolled_back', updated_at = now() WHERE attempt = %s",
            (attempt,),
        )
        conn.execute(
            "UPDATE assets SET state = 'destroyed', attempt = NULL, updated_at = now() "
            "WHERE attempt = %s AND state = 'creating'",
            (attempt,),
        )
        conn.execute(
            "UPDATE commit_attempts SET state = 'aborted', finished_at = now() WHERE attempt = %s",
            (attempt,),
        )
    return len(strays)


def carry_out_destructions(conn: psycopg.Connection, physical: PhysicalAssets) -> int:
    with conn.transaction():
        rows = conn.execute(
            "SELECT d.id, a.kind, a.name, a.hash, a.entity, a.spec FROM destruction_ledger d "
            "JOIN assets a USING (hash) WHERE d.state = 'pending' ORDER BY d.id"
        ).fetchall()
    done = 0
    for row in rows:
        bp = bank.blueprint_of(row[1:])
        crash_point("before_destroy_asset")
        physical.destroy(bp)
        crash_point("after_destroy_asset")
        with conn.transaction():
            conn.execute(
                "UPDATE destruction_ledger SET state = 'done', updated_at = now() WHERE id = %s",
                (row[0],),
            )
            conn.execute(
                "UPDATE assets SET state = 'destroyed', updated_at = now() WHERE hash = %s AND state = 'destroying'",
                (bp.hash,),
            )
        done += 1
    return done
