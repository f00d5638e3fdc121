"""Branches, their commits and commit attempts in Postgres: the one place their SQL lives.

A branch's ``head`` is the commit whose graph it shows (NULL: an empty branch). A commit
attempt is ``open`` from its creation intent until its commit point (``committed``) or its
rollback by recovery (``aborted``).
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg


@dataclass(frozen=True)
class Branch:
    name: str
    head: int | None  # commits.id; None: nothing committed yet


@dataclass(frozen=True)
class OpenAttempt:
    attempt: str  # uuid text
    branch: str


# ------------------------------------------------------------------------------ branches


def list_branches(conn: psycopg.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT name FROM branches ORDER BY name")]


def get_branch(conn: psycopg.Connection, name: str) -> Branch | None:
    row = conn.execute("SELECT head FROM branches WHERE name = %s", (name,)).fetchone()
    return None if row is None else Branch(name, row[0])


def get_branch_for_update(conn: psycopg.Connection, name: str) -> Branch | None:
    """Row-locks the branch until the transaction ends: its head cannot move under a commit
    point."""
    row = conn.execute("SELECT head FROM branches WHERE name = %s FOR UPDATE", (name,)).fetchone()
    return None if row is None else Branch(name, row[0])


def insert_branch(conn: psycopg.Connection, name: str) -> bool:
    """An empty branch; False if one of that name exists."""
    cur = conn.execute("INSERT INTO branches (name) VALUES (%s) ON CONFLICT DO NOTHING", (name,))
    return cur.rowcount != 0


def insert_branch_at(conn: psycopg.Connection, name: str, head: int | None) -> bool:
    """A branch showing commit ``head`` (a clone); False if one of that name exists."""
    cur = conn.execute(
        "INSERT INTO branches (name, head) VALUES (%s, %s) ON CONFLICT DO NOTHING", (name, head)
    )
    return cur.rowcount != 0


def delete_branch(conn: psycopg.Connection, name: str) -> None:
    conn.execute("DELETE FROM branches WHERE name = %s", (name,))


def set_head(conn: psycopg.Connection, branch: str, commit_id: int) -> None:
    conn.execute("UPDATE branches SET head = %s WHERE name = %s", (commit_id, branch))


# ------------------------------------------------------------------------------- commits


def insert_commit(
    conn: psycopg.Connection,
    branch: str,
    parent: int | None,
    message: str,
    author: str,
    wire: bytes,
    hashes: list[str],
) -> int:
    """Record a commit (its graph as wire bytes, the asset hashes it references); its id."""
    row = conn.execute(
        "INSERT INTO commits (branch, parent, message, author, wire, hashes) "
        "VALUES (%s, %s, %s, %s, %s, %s) RETURNING id",
        (branch, parent, message, author, wire, hashes),
    ).fetchone()
    assert row is not None
    return int(row[0])


def commit_wire(conn: psycopg.Connection, commit_id: int) -> bytes | None:
    """The canonical wire bytes of a commit's graph; None if there is no such commit."""
    row = conn.execute("SELECT wire FROM commits WHERE id = %s", (commit_id,)).fetchone()
    return None if row is None else bytes(row[0])


# ------------------------------------------------------------------------------ attempts


def open_attempt(
    conn: psycopg.Connection, attempt: str, branch: str, base_head: int | None
) -> None:
    conn.execute(
        "INSERT INTO commit_attempts (attempt, branch, base_head, state) "
        "VALUES (%s, %s, %s, 'open')",
        (attempt, branch, base_head),
    )


def open_attempts(conn: psycopg.Connection) -> list[OpenAttempt]:
    """Attempts that reached neither their commit point nor a rollback: live or dead."""
    rows = conn.execute(
        "SELECT attempt::text, branch FROM commit_attempts WHERE state = 'open'"
    ).fetchall()
    return [OpenAttempt(a, b) for a, b in rows]


def mark_attempt_committed(conn: psycopg.Connection, attempt: str) -> None:
    conn.execute(
        "UPDATE commit_attempts SET state = 'committed', finished_at = now() WHERE attempt = %s",
        (attempt,),
    )


def mark_attempt_aborted(conn: psycopg.Connection, attempt: str) -> None:
    conn.execute(
        "UPDATE commit_attempts SET state = 'aborted', finished_at = now() WHERE attempt = %s",
        (attempt,),
    )
