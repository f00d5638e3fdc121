"""Commit requests in Postgres (``commit_requests``): the one place their SQL lives.

A client inserts a request; the commit sensor reads the ``pending`` ones; the commit run marks
its request ``running``, appends progress lines and records the outcome, which the waiting
client polls.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

import psycopg

Outcome = Literal["committed", "rejected", "failed"]


@dataclass(frozen=True)
class CommitRequest:
    id: int
    branch: str
    message: str
    author: str
    wire: bytes
    state: str


@dataclass(frozen=True)
class RequestStatus:
    """What a waiting client sees: the state, every progress line so far, the outcome."""

    state: str
    progress: list[str]
    result: dict[str, Any] | None  # set with a final state


def _request_of(row: tuple[Any, ...]) -> CommitRequest:
    i, b, m, a, w, s = row
    return CommitRequest(i, b, m, a, bytes(w), s)


def insert(conn: psycopg.Connection, branch: str, message: str, author: str, wire: bytes) -> int:
    """Record a ``pending`` request; its id."""
    row = conn.execute(
        "INSERT INTO commit_requests (branch, message, author, wire) VALUES (%s, %s, %s, %s) "
        "RETURNING id",
        (branch, message, author, wire),
    ).fetchone()
    assert row is not None
    return int(row[0])


def pending_after(conn: psycopg.Connection, after: int) -> list[CommitRequest]:
    """Pending requests with an id above ``after`` (the sensor's cursor), oldest first."""
    rows = conn.execute(
        "SELECT id, branch, message, author, wire, state FROM commit_requests "
        "WHERE state = 'pending' AND id > %s ORDER BY id",
        (after,),
    ).fetchall()
    return [_request_of(r) for r in rows]


def get(conn: psycopg.Connection, request_id: int) -> CommitRequest | None:
    row = conn.execute(
        "SELECT id, branch, message, author, wire, state FROM commit_requests WHERE id = %s",
        (request_id,),
    ).fetchone()
    return None if row is None else _request_of(row)


def mark_running(conn: psycopg.Connection, request_id: int, run_id: str) -> None:
    """The Dagster run ``run_id`` carries the request out."""
    conn.execute(
        "UPDATE commit_requests SET state = 'running', run_id = %s, updated_at = now() "
        "WHERE id = %s",
        (run_id, request_id),
    )


def record_outcome(
    conn: psycopg.Connection, request_id: int, state: Outcome, result: dict[str, Any]
) -> None:
    """The final state and its result (the outcome, or the errors)."""
    conn.execute(
        "UPDATE commit_requests SET state = %s, result = %s, updated_at = now() WHERE id = %s",
        (state, json.dumps(result), request_id),
    )


def append_progress(conn: psycopg.Connection, request_id: int, line: str) -> None:
    conn.execute(
        "UPDATE commit_requests SET progress = array_append(progress, %s), updated_at = now() "
        "WHERE id = %s",
        (line, request_id),
    )


def status(conn: psycopg.Connection, request_id: int) -> RequestStatus | None:
    row = conn.execute(
        "SELECT state, progress, result FROM commit_requests WHERE id = %s", (request_id,)
    ).fetchone()
    if row is None:
        return None
    state, lines, result = row
    return RequestStatus(state, list(lines), None if result is None else dict(result))
