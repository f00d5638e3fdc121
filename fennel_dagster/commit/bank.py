"""The asset bank: every physical asset, its lifecycle state, and per-branch references."""

from __future__ import annotations

from collections.abc import Iterable

import psycopg
from psycopg.types.json import Jsonb

from fennel_dagster.commit.blueprint import Blueprint


def blueprint_of(row: tuple) -> Blueprint:
    kind, name, hash_, entity, spec = row
    return Blueprint(
        kind=kind, name=name, hash=hash_, entity=entity, spec=tuple(sorted(spec.items()))
    )


_COLS = "kind, name, hash, entity, spec"


def branch_refs(conn: psycopg.Connection, branch: str) -> list[Blueprint]:
    rows = conn.execute(
        f"SELECT {', '.join('a.' + c.strip() for c in _COLS.split(','))} FROM refs r JOIN assets a USING (hash) "
        "WHERE r.branch = %s ORDER BY a.kind, a.name",
        (branch,),
    ).fetchall()
    return [blueprint_of(r) for r in rows]


def live_hashes(conn: psycopg.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT hash FROM assets WHERE state = 'live'")}


def assets_in_state(conn: psycopg.Connection, state: str) -> list[Blueprint]:
    rows = conn.execute(
        f"SELECT {_COLS} FROM assets WHERE state = %s ORDER BY kind, name", (state,)
    ).fetchall()
    return [blueprint_of(r) for r in rows]


def get(conn: psycopg.Connection, hashes: Iterable[str]) -> dict[str, Blueprint]:
    rows = conn.execute(
        f"SELECT {_COLS} FROM assets WHERE hash = ANY(%s)", (list(hashes),)
    ).fetchall()
    return {r[2]: blueprint_of(r) for r in rows}


def insert_creating(conn: psycopg.Connection, bp: Blueprint, attempt: str) -> bool:
    """Claim ``bp`` for creation by ``attempt`` (a destroyed asset is reborn); False if the
    bank holds it in another state."""
    cur = conn.execute(
        "INSERT INTO assets (hash, kind, name, entity, spec, state, attempt) "
        "VALUES (%s, %s, %s, %s, %s, 'creating', %s) ON CONFLICT (hash) DO UPDATE "
        "SET state = 'creating', attempt = EXCLUDED.attempt, updated_at = now() "
        "WHERE assets.state = 'destroyed'",
        (bp.hash, bp.kind, bp.name, bp.entity, Jsonb(bp.spec_dict()), attempt),
    )
    return cur.rowcount == 1


def ref_counts(conn: psycopg.Connection, hashes: Iterable[str]) -> dict[str, int]:
    rows = conn.execute(
        "SELECT hash, count(*) FROM refs WHERE hash = ANY(%s) GROUP BY hash", (list(hashes),)
    ).fetchall()
    return {h: int(n) for h, n in rows}
