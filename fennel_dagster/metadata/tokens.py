"""API tokens and the platform's service credential, as the metadata store keeps them.

A token reads ``fdt_<id>_<secret>``; only the id and a SHA-256 of the secret are stored, so
a copy of the database does not hand out access. (A slow password hash is not needed: the
secret is 256 random bits, not something a person chose.)
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime

import psycopg

PREFIX = "fdt"
SCOPES = ("query", "log", "commit", "admin")


@dataclass(frozen=True)
class TokenRow:
    id: str
    name: str
    secret_hash: str
    scopes: tuple[str, ...]
    branches: tuple[str, ...]
    entities: tuple[str, ...]
    created_at: datetime
    revoked_at: datetime | None

    def matches(self, secret: str) -> bool:
        return hmac.compare_digest(self.secret_hash, digest(secret))


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def split(token: str) -> tuple[str, str] | None:
    """(id, secret) of a well-formed token, else None."""
    parts = token.split("_")
    if len(parts) != 3 or parts[0] != PREFIX or not parts[1] or not parts[2]:
        return None
    return parts[1], parts[2]


def create(
    conn: psycopg.Connection,
    name: str,
    scopes: tuple[str, ...],
    branches: tuple[str, ...] = ("*",),
    entities: tuple[str, ...] = ("*",),
) -> tuple[TokenRow, str]:
    """A new token: its row and the token itself, which is shown once and never stored."""
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown or not scopes:
        raise ValueError(
            f"token {name!r}: unknown scope(s) {unknown or '(none given)'}; "
            f"choose from {', '.join(SCOPES)}"
        )
    tid, secret = secrets.token_hex(6), secrets.token_urlsafe(32).replace("_", "-")
    row = conn.execute(
        "INSERT INTO api_tokens (id, name, secret_hash, scopes, branches, entities) "
        "VALUES (%s, %s, %s, %s, %s, %s) RETURNING created_at",
        (tid, name, digest(secret), list(scopes), list(branches), list(entities)),
    ).fetchone()
    assert row is not None
    token = TokenRow(tid, name, digest(secret), scopes, branches, entities, row[0], None)
    return token, f"{PREFIX}_{tid}_{secret}"


def list_tokens(conn: psycopg.Connection, include_revoked: bool = True) -> list[TokenRow]:
    rows = conn.execute(
        "SELECT id, name, secret_hash, scopes, branches, entities, created_at, revoked_at "
        "FROM api_tokens"
        + ("" if include_revoked else " WHERE revoked_at IS NULL")
        + " ORDER BY created_at, id"
    ).fetchall()
    return [TokenRow(i, n, h, tuple(s), tuple(b), tuple(e), c, r)
            for i, n, h, s, b, e, c, r in rows]  # fmt: skip


def revoke(conn: psycopg.Connection, token_id: str) -> bool:
    """Revoke by id (or by the whole token); False if no live token has that id."""
    parts = split(token_id)
    tid = parts[0] if parts else token_id
    cur = conn.execute(
        "UPDATE api_tokens SET revoked_at = now() WHERE id = %s AND revoked_at IS NULL", (tid,)
    )
    return cur.rowcount == 1


def service_secret(conn: psycopg.Connection) -> str:
    """The shared secret engines demand on their lookup endpoints; made on first use."""
    conn.execute(
        "INSERT INTO service_credentials (name, secret) VALUES ('engine', %s) "
        "ON CONFLICT (name) DO NOTHING",
        (secrets.token_urlsafe(32),),
    )
    row = conn.execute("SELECT secret FROM service_credentials WHERE name = 'engine'").fetchone()
    assert row is not None
    return str(row[0])
