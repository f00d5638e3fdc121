"""The asset bank in Postgres: ``assets`` (every physical asset and its lifecycle state) and
``refs`` (which branch references which asset). The one place their SQL lives.

An asset moves ``creating -> live -> destroying -> destroyed`` (and a destroyed one may be
created again); its ref count is its number of ``refs`` rows. The commit protocol decides
when each transition happens and in which transaction; these functions only run the
statements.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import psycopg
from psycopg.types.json import Jsonb

AssetState = Literal["creating", "live", "destroying", "destroyed"]


@dataclass(frozen=True)
class AssetRow:
    """What the bank stores of an asset's blueprint."""

    kind: str
    name: str
    hash: str
    entity: str
    spec: dict[str, Any]


@dataclass(frozen=True)
class BranchAsset:
    """An asset as one branch references it, with its ref count over all branches."""

    branch: str
    asset: AssetRow
    refs: int


_COLS = "a.kind, a.name, a.hash, a.entity, a.spec"  # AssetRow's fields, in order


# ------------------------------------------------------------------------------- assets


def by_hash(conn: psycopg.Connection, hashes: Iterable[str]) -> dict[str, AssetRow]:
    rows = conn.execute(
        f"SELECT {_COLS} FROM assets a WHERE a.hash = ANY(%s)", (list(hashes),)
    ).fetchall()
    return {r[2]: AssetRow(*r) for r in rows}


def in_state(conn: psycopg.Connection, state: AssetState) -> list[AssetRow]:
    rows = conn.execute(
        f"SELECT {_COLS} FROM assets a WHERE a.state = %s ORDER BY a.kind, a.name", (state,)
    ).fetchall()
    return [AssetRow(*r) for r in rows]


def live_hashes(conn: psycopg.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT hash FROM assets WHERE state = 'live'")}


def insert_creating(conn: psycopg.Connection, asset: AssetRow, attempt: str) -> bool:
    """Claim ``asset`` for creation by ``attempt`` (a destroyed asset is reborn); False if the
    bank holds it in another state."""
    cur = conn.execute(
        "INSERT INTO assets (hash, kind, name, entity, spec, state, attempt) "
        "VALUES (%s, %s, %s, %s, %s, 'creating', %s) ON CONFLICT (hash) DO UPDATE "
        "SET state = 'creating', attempt = EXCLUDED.attempt, updated_at = now() "
        "WHERE assets.state = 'destroyed'",
        (asset.hash, asset.kind, asset.name, asset.entity, Jsonb(asset.spec), attempt),
    )
    return cur.rowcount == 1


def creating_by(conn: psycopg.Connection, attempt: str) -> list[AssetRow]:
    """The assets ``attempt`` claimed and has not committed: what a rollback destroys."""
    rows = conn.execute(
        f"SELECT {_COLS} FROM assets a WHERE a.attempt = %s AND a.state = 'creating'",
        (attempt,),
    ).fetchall()
    return [AssetRow(*r) for r in rows]


def mark_live(conn: psycopg.Connection, hashes: list[str]) -> None:
    """At a commit point: the attempt's creations become live (and no longer claimed)."""
    conn.execute(
        "UPDATE assets SET state = 'live', attempt = NULL, updated_at = now() WHERE hash = ANY(%s)",
        (hashes,),
    )


def mark_destroying(conn: psycopg.Connection, hashes: list[str]) -> None:
    conn.execute(
        "UPDATE assets SET state = 'destroying', updated_at = now() WHERE hash = ANY(%s)",
        (hashes,),
    )


def mark_destroyed(conn: psycopg.Connection, hash_: str) -> None:
    """After its ledgered destruction; a no-op unless the asset is still ``destroying``."""
    conn.execute(
        "UPDATE assets SET state = 'destroyed', updated_at = now() "
        "WHERE hash = %s AND state = 'destroying'",
        (hash_,),
    )


def forget_creating(conn: psycopg.Connection, attempt: str) -> None:
    """After a rollback destroyed them: ``attempt``'s uncommitted creations are destroyed."""
    conn.execute(
        "UPDATE assets SET state = 'destroyed', attempt = NULL, updated_at = now() "
        "WHERE attempt = %s AND state = 'creating'",
        (attempt,),
    )


# --------------------------------------------------------------------------------- refs


def branch_assets(conn: psycopg.Connection, branch: str) -> list[AssetRow]:
    """The assets ``branch`` references, by kind and name."""
    rows = conn.execute(
        f"SELECT {_COLS} FROM refs r JOIN assets a USING (hash) "
        "WHERE r.branch = %s ORDER BY a.kind, a.name",
        (branch,),
    ).fetchall()
    return [AssetRow(*r) for r in rows]


def branch_ref_hashes(conn: psycopg.Connection, branch: str) -> list[str]:
    return [r[0] for r in conn.execute("SELECT hash FROM refs WHERE branch = %s", (branch,))]


def all_branch_assets(conn: psycopg.Connection) -> list[BranchAsset]:
    """Every reference of every branch, with the asset and its ref count (the catalog)."""
    rows = conn.execute(
        f"SELECT r.branch, {_COLS}, (SELECT count(*) FROM refs r2 WHERE r2.hash = a.hash) "
        "FROM refs r JOIN assets a ON a.hash = r.hash"
    ).fetchall()
    return [BranchAsset(r[0], AssetRow(*r[1:6]), int(r[6])) for r in rows]


def ref_counts(conn: psycopg.Connection, hashes: Iterable[str]) -> dict[str, int]:
    """Hash -> number of branches referencing it; unreferenced hashes are absent."""
    rows = conn.execute(
        "SELECT hash, count(*) FROM refs WHERE hash = ANY(%s) GROUP BY hash", (list(hashes),)
    ).fetchall()
    return {h: int(n) for h, n in rows}


def add_ref(conn: psycopg.Connection, branch: str, hash_: str) -> None:
    """Idempotent: a reference the branch already holds stays one."""
    conn.execute(
        "INSERT INTO refs (branch, hash) VALUES (%s, %s) ON CONFLICT DO NOTHING",
        (branch, hash_),
    )


def release_refs(conn: psycopg.Connection, branch: str, hashes: list[str]) -> None:
    conn.execute("DELETE FROM refs WHERE branch = %s AND hash = ANY(%s)", (branch, hashes))


def release_branch_refs(conn: psycopg.Connection, branch: str) -> None:
    conn.execute("DELETE FROM refs WHERE branch = %s", (branch,))


def copy_refs(conn: psycopg.Connection, source: str, target: str) -> int:
    """``target`` references everything ``source`` does; returns how many references."""
    cur = conn.execute(
        "INSERT INTO refs (branch, hash) SELECT %s, hash FROM refs WHERE branch = %s",
        (target, source),
    )
    return cur.rowcount
