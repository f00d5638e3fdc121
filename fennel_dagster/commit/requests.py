"""Commit requests: a commit submitted to a Dagster deployment, carried out by a run.

``submit`` records the request; the commit sensor sees ``pending`` ones past its cursor and
launches a run per request; the run calls ``execute`` (the same two-ledger protocol as a
direct commit) which records progress and the outcome; ``wait`` lets the client stream the
progress and get the outcome — or every validation error, raised as ``CommitRejected``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from fennel_dagster.commit.errors import CommitRejected, Violation
from fennel_dagster.commit.protocol import CommitOutcome
from fennel_dagster.errors import CommitError


class CommitFailed(CommitError, RuntimeError):
    """The commit run failed for another reason than validation (see the run's logs)."""


@dataclass(frozen=True)
class CommitRequest:
    id: int
    branch: str
    message: str
    author: str
    wire: bytes
    state: str


def submit(conn: psycopg.Connection, branch: str, message: str, author: str, wire: bytes) -> int:
    with conn.transaction():
        row = conn.execute(
            "INSERT INTO commit_requests (branch, message, author, wire) VALUES (%s, %s, %s, %s) "
            "RETURNING id",
            (branch, message, author, wire),
        ).fetchone()
    assert row is not None
    return int(row[0])


def pending(conn: psycopg.Connection, after: int) -> list[CommitRequest]:
    with conn.transaction():
        rows = conn.execute(
            "SELECT id, branch, message, author, wire, state FROM commit_requests "
            "WHERE state = 'pending' AND id > %s ORDER BY id",
            (after,),
        ).fetchall()
    return [CommitRequest(i, b, m, a, bytes(w), s) for i, b, m, a, w, s in rows]


def get(conn: psycopg.Connection, request_id: int) -> CommitRequest:
    with conn.transaction():  # never leave an implicit transaction open: updates must commit
        row = conn.execute(
            "SELECT id, branch, message, author, wire, state FROM commit_requests WHERE id = %s",
            (request_id,),
        ).fetchone()
    if row is None:
        raise KeyError(f"no commit request {request_id}")
    i, b, m, a, w, s = row
    return CommitRequest(i, b, m, a, bytes(w), s)


def _update(conn: psycopg.Connection, request_id: int, **cols: Any) -> None:
    sets = ", ".join(f"{k} = %s" for k in cols)
    with conn.transaction():
        conn.execute(
            f"UPDATE commit_requests SET {sets}, updated_at = now() WHERE id = %s",  # noqa: S608
            (*cols.values(), request_id),
        )


def progress(conn: psycopg.Connection, request_id: int, line: str) -> None:
    with conn.transaction():
        conn.execute(
            "UPDATE commit_requests SET progress = array_append(progress, %s), updated_at = now() "
            "WHERE id = %s",
            (line, request_id),
        )


def outcome_json(out: CommitOutcome) -> dict[str, Any]:
    d = out.diff
    return {
        "branch": out.branch,
        "commit_id": out.commit_id,
        "created": [b.name for b in d.create],
        "reused": [b.name for b in d.reuse],
        "kept": [b.name for b in d.keep],
        "released": [b.name for b in d.release],
        "durations": out.durations,
    }


def execute(
    conn: psycopg.Connection,
    request_id: int,
    run_id: str,
    commit: Callable[[CommitRequest], CommitOutcome],
) -> dict[str, Any]:
    """Carry out a request with ``commit`` and record what happened."""
    req = get(conn, request_id)
    _update(conn, request_id, state="running", run_id=run_id)
    progress(conn, request_id, f"run {run_id} started the commit of {req.branch!r}")
    try:
        out = commit(req)
    except CommitRejected as e:
        errors = [vars(err) for err in e.errors]
        _update(conn, request_id, state="rejected", result=json.dumps({"errors": errors}))
        progress(conn, request_id, f"rejected with {len(errors)} error(s)")
        raise
    except Exception as e:
        _update(
            conn,
            request_id,
            state="failed",
            result=json.dumps({"error": f"{type(e).__name__}: {e}"}),
        )
        progress(conn, request_id, f"failed: {type(e).__name__}: {e}")
        raise
    result = outcome_json(out)
    _update(conn, request_id, state="committed", result=json.dumps(result))
    progress(conn, request_id, f"committed {req.branch!r} as commit {out.commit_id}: "
             f"{len(result['created'])} created, {len(result['reused'])} reused, "
             f"{len(result['released'])} released")  # fmt: skip
    return result


def wait(
    conn: psycopg.Connection,
    request_id: int,
    timeout: float = 300.0,
    on_progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Block until the request is done; stream progress lines; raise on rejection/failure."""
    seen = 0
    deadline = time.monotonic() + timeout
    while True:
        with conn.transaction():
            row = conn.execute(
                "SELECT state, progress, result FROM commit_requests WHERE id = %s", (request_id,)
            ).fetchone()
        assert row is not None
        state, lines, result = row
        for line in lines[seen:]:
            if on_progress is not None:
                on_progress(line)
        seen = len(lines)
        if state == "committed":
            return dict(result)
        if state == "rejected":
            raise CommitRejected([Violation(**e) for e in result["errors"]])
        if state == "failed":
            raise CommitFailed(f"commit request {request_id} failed: {result['error']}")
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"commit request {request_id} is still {state!r} after {timeout:.0f}s: is the "
                "Dagster daemon running (the commit sensor launches the commit run)?"
            )
        time.sleep(0.3)
