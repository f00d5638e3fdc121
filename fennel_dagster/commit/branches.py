"""Branches: independent graphs over one shared asset bank."""

from __future__ import annotations

import psycopg

from fennel_dagster.commit import janitor
from fennel_dagster.commit.physical import PhysicalAssets
from fennel_dagster.commit.protocol import (
    BranchNotFoundError,
    head,
    schedule_unreferenced,
)
from fennel_dagster.errors import CommitError
from fennel_dagster.metadata import locks
from fennel_dagster.wire import decode, spec


class BranchExistsError(CommitError, ValueError):
    pass


def list_branches(conn: psycopg.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT name FROM branches ORDER BY name")]


def init_branch(conn: psycopg.Connection, name: str) -> None:
    with conn.transaction():
        cur = conn.execute(
            "INSERT INTO branches (name) VALUES (%s) ON CONFLICT DO NOTHING", (name,)
        )
        if cur.rowcount == 0:
            raise BranchExistsError(
                f"branch {name!r} already exists: pick another name or delete it first"
            )


def clone_branch(
    conn: psycopg.Connection, lock_conn: psycopg.Connection, source: str, name: str
) -> int:
    """Copy ``source``'s references (no physical asset is created); returns how many."""
    locks.lock_branch(lock_conn, source)
    try:
        with conn.transaction():
            src_head = head(conn, source)
            cur = conn.execute(
                "INSERT INTO branches (name, head) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                (name, src_head),
            )
            if cur.rowcount == 0:
                raise BranchExistsError(
                    f"branch {name!r} already exists: pick another name or delete it first"
                )
            copied = conn.execute(
                "INSERT INTO refs (branch, hash) SELECT %s, hash FROM refs WHERE branch = %s",
                (name, source),
            )
            return copied.rowcount
    finally:
        locks.unlock_branch(lock_conn, source)


def delete_branch(
    conn: psycopg.Connection, lock_conn: psycopg.Connection, physical: PhysicalAssets, name: str
) -> None:
    """Release every reference of the branch; assets nobody else references are destroyed."""
    locks.lock_branch(lock_conn, name)
    try:
        with conn.transaction():
            head(conn, name)
            hashes = [
                r[0] for r in conn.execute("SELECT hash FROM refs WHERE branch = %s", (name,))
            ]
            conn.execute("DELETE FROM refs WHERE branch = %s", (name,))
            conn.execute("DELETE FROM branches WHERE name = %s", (name,))
            schedule_unreferenced(conn, hashes, None)
        janitor.carry_out_destructions(conn, physical)
    finally:
        locks.unlock_branch(lock_conn, name)


def checkout(conn: psycopg.Connection, name: str) -> spec.CommitSpec | None:
    """The branch's committed graph (None for an empty branch)."""
    commit_id = head(conn, name)
    if commit_id is None:
        return None
    row = conn.execute("SELECT wire FROM commits WHERE id = %s", (commit_id,)).fetchone()
    if row is None:
        raise BranchNotFoundError(f"branch {name!r} points at a missing commit {commit_id}")
    value = decode(bytes(row[0]))
    assert isinstance(value, spec.CommitSpec)
    return value
