"""Dagster sensors: commit requests, the engine's keep-alive, stream health."""

import psycopg
from dagster import SkipReason


def unreachable(e: psycopg.OperationalError) -> SkipReason:
    """A tick while Postgres is away: one plain reason instead of a traceback; the next tick
    (a new connection) is the retry."""
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return SkipReason(f"the metadata store (Postgres) is unreachable: {first}; retrying next tick")
