"""Commit requests: a commit submitted to a Dagster deployment, carried out by a run.

``submit`` records the request; the commit sensor sees ``pending`` ones past its cursor and
launches a run per request; the run calls ``carry_out`` (the same two-ledger protocol as a
direct commit) which records progress and the outcome; ``wait`` lets the client stream the
progress and get the outcome — or every validation error, raised as ``CommitRejected``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
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


@dataclass(frozen=True)
class CommitSummary:
    """What a commit did, by physical asset name: kept as JSON with its request, so the
    client that waits on a Dagster commit run gets it back."""

    branch: str
    commit_id: int
    created: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    durations: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, out: CommitOutcome) -> CommitSummary:
        d = out.diff
        return cls(out.branch, out.commit_id, [b.name for b in d.create],
                   [b.name for b in d.reuse], [b.name for b in d.keep],
                   [b.name for b in d.release], dict(out.durations))  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CommitSummary:
        return cls(**d)

    def __str__(self) -> str:
        return (f"commit {self.commit_id} on {self.branch!r}: {len(self.created)} created, "
                f"{len(self.reused)} reused, {len(self.released)} released")  # fmt: skip


def carry_out(
    conn: psycopg.Connection,
    request_id: int,
    run_id: str,
    commit: Callable[[CommitRequest], CommitOutcome],
) -> CommitSummary:
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
    summary = CommitSummary.of(out)
    _record_outcome(conn, request_id, "committed", summary.to_json())
    progress(conn, request_id, f"committed {req.branch!r} as commit {out.commit_id}: "
             f"{len(summary.created)} created, {len(summary.reused)} reused, "
             f"{len(summary.released)} released")  # fmt: skip
    return summary


def wait(
    conn: psycopg.Connection,
    request_id: int,
    timeout: float = 300.0,
    on_progress: Callable[[str], None] | None = None,
) -> CommitSummary:
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
            return CommitSummary.from_json(result)
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
