"""The two ledgers of the commit protocol in Postgres: the one place their SQL lives.

- Creation ledger: an attempt's intent to create an asset, recorded (and committed) before
  the asset is created; closed as ``committed`` at the commit point or ``rolled_back`` by
  recovery.
- Destruction ledger: written only at a commit point (or a branch deletion) for assets whose
  ref count reached zero; ``pending`` until the destruction is carried out.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from fennel_dagster.metadata.assets import AssetRow


@dataclass(frozen=True)
class PendingDestruction:
    id: int  # destruction_ledger.id: its order is the order destructions are carried out in
    asset: AssetRow


# ---------------------------------------------------------------------- creation ledger


def record_creation_intent(conn: psycopg.Connection, attempt: str, hash_: str) -> None:
    conn.execute(
        "INSERT INTO creation_ledger (attempt, hash, state) VALUES (%s, %s, 'intent')",
        (attempt, hash_),
    )


def commit_creations(conn: psycopg.Connection, attempt: str) -> None:
    """At the commit point: ``attempt``'s creations are the branch's now."""
    conn.execute(
        "UPDATE creation_ledger SET state = 'committed', updated_at = now() WHERE attempt = %s",
        (attempt,),
    )


def roll_back_creations(conn: psycopg.Connection, attempt: str) -> None:
    conn.execute(
        "UPDATE creation_ledger SET state = 'rolled_back', updated_at = now() WHERE attempt = %s",
        (attempt,),
    )


# ------------------------------------------------------------------- destruction ledger


def schedule_destruction(
    conn: psycopg.Connection, commit_id: int | None, hashes: list[str]
) -> None:
    """Ledger one pending destruction per hash, in order (``commit_id`` None: a branch
    deletion)."""
    for h in hashes:
        conn.execute(
            "INSERT INTO destruction_ledger (commit_id, hash, state) VALUES (%s, %s, 'pending')",
            (commit_id, h),
        )


def pending_destructions(conn: psycopg.Connection) -> list[PendingDestruction]:
    """Pending destructions with their assets, oldest first."""
    rows = conn.execute(
        "SELECT d.id, a.kind, a.name, a.hash, a.entity, a.spec FROM destruction_ledger d "
        "JOIN assets a USING (hash) WHERE d.state = 'pending' ORDER BY d.id"
    ).fetchall()
    return [PendingDestruction(int(r[0]), AssetRow(*r[1:])) for r in rows]


def mark_destruction_done(conn: psycopg.Connection, ledger_id: int) -> None:
    conn.execute(
        "UPDATE destruction_ledger SET state = 'done', updated_at = now() WHERE id = %s",
        (ledger_id,),
    )
