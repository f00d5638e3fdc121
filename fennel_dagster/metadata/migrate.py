"""Versioned SQL migrations: ``migrations/NNNN_name.sql``, applied once each, in order.

Each migration runs in its own transaction together with its row in ``schema_migrations``,
under an advisory lock, so concurrent starters apply it exactly once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

import psycopg

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_LOCK = 0x66656E6E  # "fenn"


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    found = []
    for entry in resources.files("fennel_dagster.metadata").joinpath("migrations").iterdir():
        m = _FILE.match(entry.name)
        if m:
            found.append(Migration(int(m.group(1)), m.group(2), entry.read_text()))
    return sorted(found, key=lambda m: m.version)


def migrate(conn: psycopg.Connection) -> list[int]:
    """Apply every pending migration; returns the versions applied now."""
    applied_now = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
        for m in migrations():
            if m.version in done:
                continue
            conn.execute(m.sql)
            conn.execute(
                "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (m.version, m.name)
            )
            applied_now.append(m.version)
    return applied_now


def incarnation(conn: psycopg.Connection) -> str:
    """When this schema was made (its first migration): a schema dropped and made again
    starts its ids over, and whoever remembers ids (a sensor's cursor) must tell them apart."""
    row = conn.execute(
        "SELECT floor(extract(epoch FROM applied_at) * 1000)::bigint FROM schema_migrations "
        "ORDER BY version LIMIT 1"
    ).fetchone()
    return str(row[0]) if row else "0"
