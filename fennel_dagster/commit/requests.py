"""Commit requests: a commit submitted to a Dagster deployment, carried out by a run.

``submit`` records the request; the commit sensor sees ``pending`` ones past its cursor and
launches a run per request; the run calls ``carry_out`` (the same two-ledger protocol as a
direct commit) which records progress and the outcome; ``wait`` lets the client stream the
progress and get the outcome — or every validation error, raised as ``CommitRejected``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg

from fennel_dagster.commit.errors import CommitRejected, Violation
from fennel_dagster.commit.protocol import CommitOutcome
from fennel_dagster.errors import CommitError
from fennel_dagster.metadata import requests as stored
from fennel_dagster.metadata.requests import CommitRequest


class CommitFailed(CommitError, RuntimeError):
    """The commit run failed for another reason than validation (see the run's logs)."""


def submit(conn: psycopg.Connection, branch: str, message: str, author: str, wire: bytes) -> int:
    with conn.transaction():
        return stored.insert(conn, branch, message, author, wire)


def pending(conn: psycopg.Connection, after: int) -> list[CommitRequest]:
    with conn.transaction():
        return stored.pending_after(conn, after)


def get(conn: psycopg.Connection, request_id: int) -> CommitRequest:
    with conn.transaction():  # never leave an implicit transaction open: updates must commit
        req = stored.get(conn, request_id)
    if req is None:
        raise KeyError(f"no commit request {request_id}")
    return req


def _mark_running(conn: psycopg.Connection, request_id: int, run_id: str) -> None:
    with conn.transaction():
        stored.mark_running(conn, request_id, run_id)


def _record_outcome(
    conn: psycopg.Connection, request_id: int, state: stored.Outcome, result: dict[str, Any]
) -> None:
    with conn.transaction():
        stored.record_outcome(conn, request_id, state, result)


def progress(conn: psycopg.Connection, request_id: int, line: str) -> None:
    with conn.transaction():
        stored.append_progress(conn, request_id, line)


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


def carry_out(
    conn: psycopg.Connection,
    request_id: int,
    run_id: str,
    commit: Callable[[CommitRequest], CommitOutcome],
) -> dict[str, Any]:
    """Carry out a request with ``commit`` and record what happened."""
    req = get(conn, request_id)
    _mark_running(conn, request_id, run_id)
    progress(conn, request_id, f"run {run_id} started the commit of {req.branch!r}")
    try:
        out = commit(req)
    except CommitRejected as e:
        errors = [vars(err) for err in e.errors]
        _record_outcome(conn, request_id, "rejected", {"errors": errors})
        progress(conn, request_id, f"rejected with {len(errors)} error(s)")
        raise
    except Exception as e:
        _record_outcome(conn, request_id, "failed", {"error": f"{type(e).__name__}: {e}"})
        progress(conn, request_id, f"failed: {type(e).__name__}: {e}")
        raise
    result = outcome_json(out)
    _record_outcome(conn, request_id, "committed", result)
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
            status = stored.status(conn, request_id)
        assert status is not None
        state, lines, result = status.state, status.progress, status.result
        for line in lines[seen:]:
            if on_progress is not None:
                on_progress(line)
        seen = len(lines)
        if state == "committed":
            assert result is not None
            return result
        if state == "rejected":
            assert result is not None
            raise CommitRejected([Violation(**e) for e in result["errors"]])
        if state == "failed":
            assert result is not None
            raise CommitFailed(f"commit request {request_id} failed: {result['error']}")
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"commit request {request_id} is still {state!r} after {timeout:.0f}s: is the "
                "Dagster daemon running (the commit sensor launches the commit run)?"
            )
        time.sleep(0.3)
