"""Hostile input: schemathesis against the OpenAPI document and the GraphQL schema, plus
hand-made bombs. The server never answers 5xx; every refusal is a 4xx whose message names
the field at fault."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.serve.conftest import Serving

pytestmark = pytest.mark.services
EXAMPLES = 40  # per operation: enough to find a crash, small enough for CI


def _no_server_error(resp: Any, what: str) -> None:
    if what == "POST /api/v1/sleep" and resp.status_code == 504:  # the barrier's timeout
        assert resp.json()["error"].startswith("sleep: "), resp.text[:500]
        return
    assert resp.status_code < 500, f"{what}: {resp.status_code} {resp.text[:500]}"
    if resp.status_code >= 400:
        body = resp.json()
        assert isinstance(body.get("error") or body.get("errors"), str | list), body


@pytest.fixture(scope="module")
def fuzz_token(loaded, serving: Serving) -> str:  # type: ignore[no-untyped-def]
    # query and log only: the fuzzer must not delete the branch the other tests read
    return serving.token("fuzzer", ("query", "log"))


def test_the_http_api_never_answers_a_server_error(serving: Serving, fuzz_token: str) -> None:
    auth = {"Authorization": f"Bearer {fuzz_token}"}
    schema = schemathesis.openapi.from_url(f"{serving.url}/openapi.json")
    operations = [r.ok() for r in schema.get_all_operations()]
    assert len(operations) >= 9
    for op in operations:
        _fuzz(op, serving.url, auth, f"{op.method.upper()} {op.path}", with_case_headers=True)


def _fuzz(op: Any, url: str, auth: dict[str, str], what: str, with_case_headers: bool) -> None:
    """``EXAMPLES`` generated cases of one operation against the running server."""

    @given(case=op.as_strategy())
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    def check(case: Any) -> None:
        headers = {**((case.headers or {}) if with_case_headers else {}), **auth}
        _no_server_error(case.call(base_url=url, headers=headers, timeout=60), what)

    check()


def _json_nodes() -> st.SearchStrategy[Any]:
    """GraphQL literals for the JSON scalar: anything, including what fits the API."""
    nodes = schemathesis.graphql.nodes
    leaf = (st.integers(-(2**70), 2**70).map(nodes.Int) | st.text(max_size=12).map(nodes.String)
            | st.booleans().map(nodes.Boolean) | st.just(nodes.Null))  # fmt: skip
    return st.recursive(
        leaf, lambda inner: st.lists(inner, max_size=4).map(nodes.List), max_leaves=12
    )


def test_the_graphql_api_never_answers_a_server_error(serving: Serving, fuzz_token: str) -> None:
    auth = {"Authorization": f"Bearer {fuzz_token}"}
    nodes = schemathesis.graphql.nodes
    schemathesis.graphql.scalar("JSON", _json_nodes())
    schemathesis.graphql.scalar(
        "Int64", (st.integers(-(2**64), 2**64) | st.sampled_from([1, 2, 3])).map(nodes.Int)
    )
    schema = schemathesis.graphql.from_url(f"{serving.url}/graphql", headers=auth)
    for result in schema.get_all_operations():
        op = result.ok()
        _fuzz(op, serving.url, auth, op.label, with_case_headers=False)


def _gql(serving: Serving, token: str, query: Any, variables: Any = None) -> httpx.Response:
    return httpx.post(f"{serving.url}/graphql", json={"query": query, "variables": variables},
                      headers={"Authorization": f"Bearer {token}"}, timeout=60)  # fmt: skip


def test_graphql_bombs_and_wrong_types_are_refused_with_reasons(
    serving: Serving, fuzz_token: str
) -> None:
    # strawberry's depth limit skips introspection; graphql-core's parser refuses a deep
    # introspection chain, and fragment cycles never pass validation
    deep = (
        "{ __schema { types { fields { type "
        + "{ ofType " * 1500
        + "{ name }"
        + " }" * 1500
        + " } } } }"
    )
    cycle = "query { ...A } fragment A on Query { ...B } fragment B on Query { ...A }"
    cases: list[tuple[str, Any, Any, str]] = [
        ("depth bomb", deep, None, "nested too deeply"),
        ("fragment cycle", cycle, None, "Cannot spread fragment"),
        ("alias bomb", "{ " + " ".join(f"a{i}: userFeatures(uid: {i}) {{ country }}" for i in range(200)) + " }",
         None, "aliases"),
        ("token bomb", "{ userFeatures(uid: 1) { " + "country " * 5000 + "} }", None, "token"),
        ("wrong type", "{ userFeatures(uid: \"seven\") { country } }", None, "Int64"),
        ("int overflow", "{ userFeatures(uid: 99999999999999999999) { country } }", None, "64-bit"),
        ("unknown field", "{ userFeatures(uid: 1) { nope } }", None, "nope"),
        ("unknown feature", "{ query(inputs: [\"UserFeatures.uid\"], outputs: [\"UserFeatures.nope\"], "
         "data: {}) }", None, "UserFeatures.nope"),
        ("ragged columns", "query($d: JSON!) { query(inputs: [\"UserFeatures.uid\"], outputs: "
         "[\"UserFeatures.country\"], data: $d) }", {"d": {"UserFeatures.uid": "x"}}, "UserFeatures.uid"),
        ("bad value type", "query($d: JSON!) { query(inputs: [\"UserFeatures.uid\"], outputs: "
         "[\"UserFeatures.country\"], data: $d) }", {"d": {"UserFeatures.uid": ["x"]}}, "UserFeatures.uid"),
        ("huge input", "query($d: JSON!) { query(inputs: [\"UserFeatures.uid\"], outputs: "
         "[\"UserFeatures.country\"], data: $d) }", {"d": {"UserFeatures.uid": list(range(200_001))}}, "rows"),
        ("not a document", 12, None, "query"),
        ("syntax", "{ userFeatures(uid: 1) { country ", None, "Syntax Error"),
    ]  # fmt: skip
    for what, query, variables, mentions in cases:
        resp = _gql(serving, fuzz_token, query, variables)
        assert 400 <= resp.status_code < 500 or (resp.status_code == 200 and "errors" in resp.json()), (
            what, resp.status_code, resp.text[:300])  # fmt: skip
        assert mentions.lower() in resp.text.lower(), (what, resp.text[:500])


@given(
    body=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
        ),
        max_leaves=20,
    )
)
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_any_json_body_to_any_route_is_a_client_error_at_worst(body: Any) -> None:
    serving, token = _FUZZ["serving"], _FUZZ["token"]
    for path in ("/api/v1/query", "/api/v1/explain", "/api/v1/dataset/UserSpend/lookup",
                 "/api/v1/log/ops_webhook/users", "/graphql"):  # fmt: skip
        resp = httpx.post(serving.url + path, json=body, timeout=60,
                          headers={"Authorization": f"Bearer {token}"})  # fmt: skip
        _no_server_error(resp, path)


_FUZZ: dict[str, Any] = {}


@pytest.fixture(autouse=True)
def _remember(request: pytest.FixtureRequest) -> None:
    if request.function.__name__ == "test_any_json_body_to_any_route_is_a_client_error_at_worst":
        _FUZZ["serving"] = request.getfixturevalue("serving")
        _FUZZ["token"] = request.getfixturevalue("fuzz_token")
