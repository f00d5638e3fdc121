"""Offline query requests in Postgres (``offline_queries``): the one place their SQL lives.

A client (in process, or a query server for an HTTP client) inserts a request; a Dagster
run, or the client's own Spark session, claims it, reports progress and records the
outcome; clients poll it and may ask for a cancel.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import psycopg

State = Literal["pending", "running", "done", "failed", "cancelled"]
FINAL: tuple[State, ...] = ("done", "failed", "cancelled")


@dataclass(frozen=True)
class OfflineQueryRequest:
    """What to compute and where: ``input_uri`` (Parquet, CSV or Delta at an ``s3://`` or
    local path) holds a column per input feature and ``timestamp_column``; the result goes
    to ``output_uri`` as ``output_format``."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    timestamp_column: str
    input_uri: str
    output_uri: str
    input_format: str = "parquet"
    output_format: str = "parquet"
    feature_to_column_map: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> OfflineQueryRequest:
        return cls(
            inputs=tuple(raw["inputs"]), outputs=tuple(raw["outputs"]),
            timestamp_column=raw["timestamp_column"], input_uri=raw["input_uri"],
            output_uri=raw["output_uri"], input_format=raw.get("input_format", "parquet"),
            output_format=raw.get("output_format", "parquet"),
            feature_to_column_map=dict(raw.get("feature_to_column_map") or {}),
        )  # fmt: skip


@dataclass(frozen=True)
class OfflineQueryStatus:
    """What a polling client sees."""

    request_id: int
    branch: str
    state: State
    request: OfflineQueryRequest
    progress: dict[str, Any] | None  # stage, tasks_done, tasks_total, elapsed_s, eta_s
    result: dict[str, Any] | None  # output_uri, rows, seconds; or error
    cancel_requested: bool
    run_id: str | None

    @property
    def finished(self) -> bool:
        return self.state in FINAL

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["request"] = asdict(self.request)
        return out


_COLUMNS = "id, branch, state, request, progress, result, cancel, run_id"


def _status_of(row: tuple[Any, ...]) -> OfflineQueryStatus:
    i, b, s, req, prog, res, cancel, run = row
    return OfflineQueryStatus(
        int(i), b, s, OfflineQueryRequest.from_json(req), prog, res, bool(cancel), run
    )


def insert(conn: psycopg.Connection, branch: str, request: OfflineQueryRequest) -> int:
    row = conn.execute(
        "INSERT INTO offline_queries (branch, request) VALUES (%s, %s) RETURNING id",
        (branch, request.to_json()),
    ).fetchone()
    assert row is not None
    return int(row[0])


def status(conn: psycopg.Connection, request_id: int) -> OfflineQueryStatus | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM offline_queries WHERE id = %s", (request_id,)
    ).fetchone()
    return None if row is None else _status_of(row)


def pending_after(conn: psycopg.Connection, after: int) -> list[int]:
    """Ids of pending requests above ``after`` (a sensor's cursor), oldest first."""
    rows = conn.execute(
        "SELECT id FROM offline_queries WHERE state = 'pending' AND id > %s ORDER BY id",
        (after,),
    ).fetchall()
    return [int(r[0]) for r in rows]


def claim(conn: psycopg.Connection, request_id: int, run_id: str) -> OfflineQueryStatus | None:
    """Mark a pending request running under ``run_id``; None if it is not pending (taken by
    another run, or cancelled before it started)."""
    row = conn.execute(
        "UPDATE offline_queries SET state = 'running', run_id = %s, updated_at = now() "
        f"WHERE id = %s AND state = 'pending' RETURNING {_COLUMNS}",
        (run_id, request_id),
    ).fetchone()
    return None if row is None else _status_of(row)


def report_progress(conn: psycopg.Connection, request_id: int, progress: dict[str, Any]) -> bool:
    """Record progress; returns whether a cancel was asked for."""
    row = conn.execute(
        "UPDATE offline_queries SET progress = %s, updated_at = now() WHERE id = %s "
        "RETURNING cancel",
        (json.dumps(progress), request_id),
    ).fetchone()
    return bool(row and row[0])


def finish(conn: psycopg.Connection, request_id: int, state: State, result: dict[str, Any]) -> None:
    conn.execute(
        "UPDATE offline_queries SET state = %s, result = %s, updated_at = now() WHERE id = %s",
        (state, json.dumps(result), request_id),
    )


def request_cancel(conn: psycopg.Connection, request_id: int) -> OfflineQueryStatus | None:
    """Ask a request to stop: a pending one is cancelled at once, a running one at its next
    progress report; a finished one stays as it is."""
    conn.execute(
        "UPDATE offline_queries SET cancel = true, updated_at = now(), "
        "state = CASE WHEN state = 'pending' THEN 'cancelled' ELSE state END, "
        "result = CASE WHEN state = 'pending' THEN '{\"error\": \"cancelled before it started\"}'"
        "::jsonb ELSE result END WHERE id = %s",
        (request_id,),
    )
    return status(conn, request_id)
