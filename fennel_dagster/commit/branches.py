"""Branches: independent graphs over one shared asset bank.

Their errors (``commit/errors.py``) say what Fennel's say, with the fix in ``hint``."""

from __future__ import annotations

import psycopg

from fennel_dagster.commit import janitor
from fennel_dagster.commit.errors import (
    MAIN_BRANCH,
    BranchExistsError,
    BranchNotFoundError,
    branch_exists,
    clone_source_missing,
    deleted_branch_missing,
    main_branch_deletion,
)
from fennel_dagster.commit.physical import PhysicalAssets
from fennel_dagster.commit.protocol import head, schedule_unreferenced
from fennel_dagster.metadata import assets, commits, locks
from fennel_dagster.wire import decode, spec


def list_branches(conn: psycopg.Connection) -> list[str]:
    return commits.list_branches(conn)


def init_branch(conn: psycopg.Connection, name: str) -> None:
    with conn.transaction():
        if not commits.insert_branch(conn, name):
            raise branch_exists(name)


def clone_branch(
    conn: psycopg.Connection, lock_conn: psycopg.Connection, source: str, name: str
) -> int:
    """Copy ``source``'s references (no physical asset is created); returns how many."""
    locks.lock_branch(lock_conn, source)
    try:
        with conn.transaction():
            known = commits.list_branches(conn)
            if name in known:  # checked first, as Fennel does
                raise branch_exists(name, cloning=True)
            if source not in known:
                raise clone_source_missing(source, known)
            src_head = head(conn, source)
            if not commits.insert_branch_at(conn, name, src_head):
                raise branch_exists(name, cloning=True)
            return assets.copy_refs(conn, source, name)
    finally:
        locks.unlock_branch(lock_conn, source)


def delete_branch(
    conn: psycopg.Connection,
    lock_conn: psycopg.Connection,
    physical: PhysicalAssets,
    name: str,
    even_main: bool = False,
) -> None:
    """Release every reference of the branch; assets nobody else references are destroyed.
    The main branch cannot be deleted (as in Fennel) but by a teardown (``even_main``)."""
    with conn.transaction():
        known = commits.list_branches(conn)
    if name not in known:  # checked first, as Fennel does
        raise deleted_branch_missing(name, known)
    if name == MAIN_BRANCH and not even_main:
        raise main_branch_deletion()
    locks.lock_branch(lock_conn, name)
    try:
        with conn.transaction():
            if commits.get_branch(conn, name) is None:  # deleted while we waited for the lock
                raise deleted_branch_missing(name, commits.list_branches(conn))
            hashes = assets.branch_ref_hashes(conn, name)
            assets.release_branch_refs(conn, name)
            commits.delete_branch(conn, name)
            schedule_unreferenced(conn, hashes, None)
        janitor.carry_out_destructions(conn, physical)
    finally:
        locks.unlock_branch(lock_conn, name)


def checkout(conn: psycopg.Connection, name: str) -> spec.CommitSpec | None:
    """The branch's committed graph (None for an empty branch)."""
    return checkout_commit(conn, head(conn, name), name)


def checkout_commit(
    conn: psycopg.Connection, commit_id: int | None, branch: str = ""
) -> spec.CommitSpec | None:
    """The graph of commit ``commit_id`` (None: an empty branch)."""
    if commit_id is None:
        return None
    wire = commits.commit_wire(conn, commit_id)
    if wire is None:
        raise BranchNotFoundError(f"branch {branch!r} points at a missing commit {commit_id}")
    value = decode(wire)
    assert isinstance(value, spec.CommitSpec)
    return value


__all__ = ["BranchExistsError", "BranchNotFoundError", "checkout", "checkout_commit",
           "clone_branch", "delete_branch", "init_branch", "list_branches"]  # fmt: skip
