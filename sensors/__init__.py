"""Dagster sensors: commit requests, the engine's keep-alive, stream health."""

import psycopg
from dagster import SkipReason


def unreachable(e: psycopg.OperationalError) -> SkipReason:
    """A tick while Postgres is away: one plain reason instead of a traceback; the next tick
    (a new connection) is the retry."""
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return SkipReason(f"the metadata store (Postgres) is unreachable: {first}; retrying next tick")


def last_launched(cursor: str | None, schema: str, born: str) -> int:
    """The last request id a request sensor launched a run for, from its cursor
    ``<schema>:<incarnation>:<id>``; 0 for another schema, or for an earlier incarnation of
    this one (dropped and made again, its ids start over)."""
    parts = (cursor or "").split(":")
    if len(parts) == 3 and parts[:2] == [schema, born] and parts[2].isdigit():
        return int(parts[2])
    return 0


def request_cursor(schema: str, born: str, last_id: int) -> str:
    return f"{schema}:{born}:{last_id}"
