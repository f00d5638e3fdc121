"""Who may do what: bearer tokens with scopes, branch patterns and entity allow-lists.

Every decision is made in memory from the tokens ``state`` keeps; a refusal is an
``AuthError`` carrying its HTTP status (401: who are you; 403: not allowed) and a reason
that names the scope, branch or entity, never the secret.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase

from fennel_dagster.errors import QueryError
from fennel_dagster.metadata.tokens import TokenRow, split
from fennel_dagster.query.plan import QueryPlan


class AuthError(QueryError, PermissionError):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


@dataclass(frozen=True)
class Principal:
    token: TokenRow

    def require(self, scope: str, branch: str) -> None:
        """The token holds ``scope`` (or admin) on ``branch``."""
        t = self.token
        if scope not in t.scopes and "admin" not in t.scopes:
            raise AuthError(
                403, f"token {t.name!r} lacks the {scope!r} scope (it has {', '.join(t.scopes)})"
            )
        if not any(fnmatchcase(branch, p) for p in t.branches):
            raise AuthError(403, f"token {t.name!r} may not use branch {branch!r}")

    def require_entities(self, names: Iterable[str]) -> None:
        """The token may touch every named featureset and dataset."""
        if "*" in self.token.entities:
            return
        denied = sorted(
            {n for n in names if not any(fnmatchcase(n, p) for p in self.token.entities)}
        )
        if denied:
            raise AuthError(403, f"token {self.token.name!r} may not read {', '.join(denied)}")


def authenticate(header: str | None, tokens: Mapping[str, TokenRow]) -> Principal:
    """The principal of an ``Authorization: Bearer fdt_…`` header."""
    if not header:
        raise AuthError(401, "missing token: send Authorization: Bearer <token>")
    scheme, _, value = header.partition(" ")
    parts = split(value.strip()) if scheme.lower() == "bearer" else None
    if parts is None:
        raise AuthError(401, "malformed token: expected Authorization: Bearer fdt_<id>_<secret>")
    row = tokens.get(parts[0])
    if row is None or not row.matches(parts[1]):
        raise AuthError(401, "unknown token: create one with `fennel-dagster token create`")
    if row.revoked_at is not None:
        raise AuthError(401, f"token {row.name!r} was revoked")
    return Principal(row)


def entities_of(plan: QueryPlan) -> set[str]:
    """Every featureset an input, output or step belongs to, and every dataset a step reads."""
    names = {f.split(".", 1)[0] for f in (*plan.inputs, *plan.outputs)}
    for ex in plan.steps:
        names.add(ex.featureset)
        names.update(i.split(".", 1)[0] for i in ex.inputs)
        names.update(ex.deps)
        if ex.lookup_dataset:
            names.add(ex.lookup_dataset)
    return names
