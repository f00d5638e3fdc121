"""Connections to the metadata store, optionally confined to one schema (tests, tenants)."""

from __future__ import annotations

import re

import psycopg

from fennel_dagster.settings import Settings

_IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")


def connect(
    settings: Settings, schema: str | None = None, autocommit: bool = False
) -> psycopg.Connection:
    """A connection whose ``search_path`` is ``schema`` (created if missing)."""
    conn = psycopg.connect(settings.pg_dsn(), autocommit=autocommit, connect_timeout=5)
    if schema is not None:
        if not _IDENT.match(schema):
            raise ValueError(f"metadata schema {schema!r} must be a lowercase SQL identifier")
        with conn.transaction():
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            conn.execute(f"SET search_path TO {schema}")
        if not autocommit:
            conn.commit()
    return conn
