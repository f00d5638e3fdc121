"""The asset bank: every physical asset, its lifecycle state, and per-branch references.

Blueprints over ``metadata.assets`` (where the SQL lives): the bank stores a blueprint's
spec as a JSON object, a ``Blueprint`` holds it as sorted pairs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import psycopg

from fennel_dagster.commit.blueprint import AssetKind, Blueprint
from fennel_dagster.metadata import assets
from fennel_dagster.metadata.assets import AssetRow


def blueprint_of(row: AssetRow) -> Blueprint:
    return Blueprint(
        kind=cast(AssetKind, row.kind),
        name=row.name,
        hash=row.hash,
        entity=row.entity,
        spec=tuple(sorted(row.spec.items())),
    )


def row_of(bp: Blueprint) -> AssetRow:
    return AssetRow(bp.kind, bp.name, bp.hash, bp.entity, bp.spec_dict())


def branch_refs(conn: psycopg.Connection, branch: str) -> list[Blueprint]:
    return [blueprint_of(r) for r in assets.branch_assets(conn, branch)]


def live_hashes(conn: psycopg.Connection) -> set[str]:
    return assets.live_hashes(conn)


def assets_in_state(conn: psycopg.Connection, state: assets.AssetState) -> list[Blueprint]:
    return [blueprint_of(r) for r in assets.in_state(conn, state)]


def get(conn: psycopg.Connection, hashes: Iterable[str]) -> dict[str, Blueprint]:
    return {h: blueprint_of(r) for h, r in assets.by_hash(conn, hashes).items()}


def insert_creating(conn: psycopg.Connection, bp: Blueprint, attempt: str) -> bool:
    """Claim ``bp`` for creation by ``attempt`` (a destroyed asset is reborn); False if the
    bank holds it in another state."""
    return assets.insert_creating(conn, row_of(bp), attempt)


def ref_counts(conn: psycopg.Connection, hashes: Iterable[str]) -> dict[str, int]:
    return assets.ref_counts(conn, hashes)
