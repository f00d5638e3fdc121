"""Per-branch advisory locks: one committer (or janitor, or clone) per branch at a time.

Session-level locks on an autocommit connection, so a committer that dies releases its lock
with its connection.
"""

from __future__ import annotations

import hashlib
import time

import psycopg


def branch_lock_key(branch: str) -> int:
    """A stable 63-bit advisory-lock key per branch name."""
    digest = hashlib.sha256(f"fennel-branch:{branch}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def lock_branch(lock_conn: psycopg.Connection, branch: str) -> None:
    lock_conn.execute("SELECT pg_advisory_lock(%s)", (branch_lock_key(branch),))


def unlock_branch(lock_conn: psycopg.Connection, branch: str) -> None:
    lock_conn.execute("SELECT pg_advisory_unlock(%s)", (branch_lock_key(branch),))


def try_lock_branch(lock_conn: psycopg.Connection, branch: str, wait: float) -> bool:
    """Take the lock if it frees up within ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while True:
        got = lock_conn.execute(
            "SELECT pg_try_advisory_lock(%s)", (branch_lock_key(branch),)
        ).fetchone()
        if got and got[0]:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
