"""Every route × {no token, malformed, unknown, revoked, wrong scope, wrong branch, right}:
the right status, a reason, and nothing of the data or the secret in an error body. Entity
allow-lists are checked on everything a plan touches, not just its outputs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from fennel_dagster.metadata import tokens
from fennel_dagster.metadata.db import connect
from fennel_dagster.wire import encode
from tests.serve.conftest import Serving

pytestmark = pytest.mark.services


@dataclass(frozen=True)
class Call:
    name: str
    scope: str  # the scope the route needs
    method: str
    path: str
    body: Callable[[], Any]  # JSON body, or bytes
    branch: str = "main"


def _commit_bytes() -> bytes:
    from examples.payments.datasets import DATASETS
    from examples.payments.featuresets import FEATURESETS
    from fennel_dagster.declare import commit_spec

    return encode(commit_spec("payments", DATASETS, FEATURESETS))


CALLS = [
    Call(
        "query",
        "query",
        "POST",
        "/api/v1/query",
        lambda: {
            "inputs": ["UserFeatures.uid"],
            "outputs": ["UserFeatures.country"],
            "data": {"UserFeatures.uid": [1, 2]},
        },
    ),  # fmt: skip
    Call(
        "explain",
        "query",
        "POST",
        "/api/v1/explain",
        lambda: {"inputs": ["UserFeatures.uid"], "outputs": ["UserFeatures"]},
    ),  # fmt: skip
    Call(
        "lookup",
        "query",
        "POST",
        "/api/v1/dataset/UserSpend/lookup",
        lambda: {"keys": {"uid": [1, 2]}},
    ),  # fmt: skip
    Call(
        "log",
        "log",
        "POST",
        "/api/v1/log/ops_webhook/users",
        lambda: {
            "data": {"uid": [990001], "country": ["NL"], "signup_at": ["2026-01-01T00:00:00+00:00"]}
        },
    ),  # fmt: skip
    Call(
        "log (Fennel body)",
        "log",
        "POST",
        "/api/v1/log",
        lambda: {
            "webhook": "ops_webhook",
            "endpoint": "users",
            "data": {
                "uid": [990002],
                "country": ["NL"],
                "signup_at": ["2026-01-01T00:00:00+00:00"],
            },
        },
    ),  # fmt: skip
    Call(
        "graphql query",
        "query",
        "POST",
        "/graphql",
        lambda: {"query": "{ userFeatures(uid: 1) { country } }"},
    ),  # fmt: skip
    Call(
        "graphql mutation",
        "log",
        "POST",
        "/graphql",
        lambda: {
            "query": 'mutation { log(webhook: "ops_webhook", endpoint: "users", rows: '
            '[{uid: 990003, country: "NL", signup_at: "2026-01-01T00:00:00+00:00"}]) { accepted } }'
        },
    ),  # fmt: skip
    Call("commit", "commit", "POST", "/api/v1/commit", _commit_bytes),
    Call("init", "commit", "POST", "/api/v1/init", lambda: {}, branch="matrix"),
    Call("delete", "commit", "POST", "/api/v1/delete", lambda: {}, branch="matrix"),
]
OTHER_SCOPE = {"query": "log", "log": "query", "commit": "query"}


def _send(serving: Serving, call: Call, token: str | None) -> httpx.Response:
    headers = {"X-FENNEL-BRANCH": call.branch}
    if token is not None:
        headers["Authorization"] = token if token.startswith("Basic") else f"Bearer {token}"
    body = call.body()
    kw: dict[str, Any] = {"content": body} if isinstance(body, bytes) else {"json": body}
    return httpx.request(call.method, serving.url + call.path, headers=headers, timeout=120, **kw)


def _refused(resp: httpx.Response, status: int, secrets: list[str], mentions: str) -> None:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) - {"kind", "hint"} == {"error", "request_id"}, body  # a reason, no data
    assert body.get("kind") == "AuthError", body  # the class the client raises again
    assert mentions in body["error"], body
    assert not any(s in resp.text for s in secrets)


def test_every_route_answers_each_kind_of_caller_rightly(loaded, serving: Serving) -> None:  # type: ignore[no-untyped-def]
    revoked = serving.token("revoked", ("admin",))
    with connect(serving.settings, serving.settings.pg_schema, autocommit=True) as conn:
        assert tokens.revoke(conn, revoked)
    secret_of = lambda t: t.split("_")[2]  # noqa: E731
    unknown = "fdt_000000000000_" + "x" * 43
    for call in CALLS:
        right = serving.token(f"right-{call.name}", (call.scope,))
        wrong_scope = serving.token(f"scope-{call.name}", (OTHER_SCOPE[call.scope],))
        wrong_branch = serving.token(f"branch-{call.name}", (call.scope,), branches=("elsewhere",))
        secrets = [secret_of(t) for t in (right, wrong_scope, wrong_branch, revoked)]
        _refused(_send(serving, call, None), 401, secrets, "missing token")
        _refused(_send(serving, call, "Basic Zm9vOmJhcg=="), 401, secrets, "malformed token")
        _refused(_send(serving, call, "not-a-token"), 401, secrets, "malformed token")
        _refused(_send(serving, call, unknown), 401, secrets, "unknown token")
        # right id, wrong secret: unknown, and not a hint which part was wrong
        _refused(_send(serving, call, right[:-4] + "abcd"), 401, secrets, "unknown token")
        _refused(_send(serving, call, revoked), 401, secrets, "revoked")
        _refused(_send(serving, call, wrong_scope), 403, secrets, f"lacks the {call.scope!r} scope")
        _refused(
            _send(serving, call, wrong_branch), 403, secrets, f"may not use branch {call.branch!r}"
        )
        ok = _send(serving, call, right)
        assert ok.status_code == 200, (call.name, ok.text)
        if call.path == "/graphql":
            assert "errors" not in ok.json(), (call.name, ok.text)


def test_entity_allow_lists_cover_every_dataset_and_featureset_a_plan_touches(
    loaded, serving: Serving
) -> None:  # type: ignore[no-untyped-def]
    query = CALLS[0]
    only_fs = serving.token("fs-only", ("query",), entities=("UserFeatures",))
    # UserFeatures.country is a lookup of dataset User: the output alone is not enough
    _refused(_send(serving, query, only_fs), 403, [], "may not read User")
    enough = serving.token("fs+ds", ("query",), entities=("UserFeatures", "User"))
    assert _send(serving, query, enough).status_code == 200
    txn = Call("txn", "query", "POST", "/api/v1/query", lambda: {
        "inputs": ["TxnFeatures.uid", "TxnFeatures.merchant_id", "TxnFeatures.amount", "UserFeatures.uid"],
        "outputs": ["TxnFeatures.user_spend_7d"],
        "data": {"TxnFeatures.uid": [1], "TxnFeatures.merchant_id": [1], "TxnFeatures.amount": [1.0],
                 "UserFeatures.uid": [1]}})  # fmt: skip
    # an alias of UserFeatures.spend_7d: the plan runs UserFeatures' lookup of UserSpend too
    partial = serving.token("txn-only", ("query",), entities=("TxnFeatures",))
    _refused(_send(serving, txn, partial), 403, [], "UserSpend")
    lookup = CALLS[2]
    _refused(_send(serving, lookup, enough), 403, [], "may not read UserSpend")
    gql = _send(serving, CALLS[5], only_fs)
    assert gql.status_code == 403 and "may not read User" in gql.text
