"""``fennel_dagster.testing.mock``: a fresh MockClient by default; in integration mode
(``FENNEL_TEST_MODE=platform`` or Fennel's ``USE_INT_CLIENT=1``) the HTTP client of
``FENNEL_URL`` on a fresh branch, deleted afterwards with every branch the test made, also
when the test fails. A query server stand-in over httpx's transport records the calls."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from fennel_dagster import testing
from fennel_dagster.client import Client
from fennel_dagster.errors import ClientError
from fennel_dagster.mock import MockClient


class Stand:
    def __init__(self) -> None:
        self.branches = ["main"]
        self.calls: list[tuple[str, str]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        branch = request.headers.get("x-fennel-branch", "main")
        path = request.url.path
        self.calls.append((path, branch))
        if path == "/api/v1/init":
            self.branches.append(branch)
        elif path == "/api/v1/delete":
            self.branches.remove(branch)
        body: dict[str, Any] = {"branches": [{"name": b} for b in self.branches]}
        return httpx.Response(200, content=orjson.dumps(body))


@pytest.fixture
def stand(monkeypatch: pytest.MonkeyPatch) -> Stand:
    s = Stand()

    def client() -> Client:
        c = Client("http://stand", "t")
        c.http = httpx.Client(base_url="http://stand", transport=httpx.MockTransport(s))
        return c

    monkeypatch.setattr(testing, "platform_client", client)
    return s


def test_default_mode_passes_a_fresh_mock_client(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("FENNEL_TEST_MODE", "USE_INT_CLIENT"):
        monkeypatch.delenv(var, raising=False)
    seen: list[Any] = []

    @testing.mock
    def test_x(client: Any) -> None:
        seen.append(client)
        assert client.is_integration_client() is False

    test_x()
    test_x()
    assert all(isinstance(c, MockClient) for c in seen) and seen[0] is not seen[1]


@pytest.mark.parametrize("env", [{"FENNEL_TEST_MODE": "platform"}, {"USE_INT_CLIENT": "1"}])
def test_platform_mode_runs_on_a_fresh_branch_deleted_after_a_failure(
    stand: Stand, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    got: list[Any] = []

    @testing.mock
    def test_y(client: Any) -> None:
        got.append((client.branch(), client.is_integration_client()))
        client.init_branch("test-branch")  # a branch the test makes itself
        raise AssertionError("the test's own failure")

    with pytest.raises(AssertionError, match="the test's own failure"):
        test_y()
    branch, integration = got[0]
    assert branch.startswith("it-test_y-") and integration is True
    assert stand.branches == ["main"]  # its branch and the one it made are gone
    deleted = [b for p, b in stand.calls if p == "/api/v1/delete"]
    assert sorted(deleted) == sorted([branch, "test-branch"])


def test_platform_mode_without_a_url_names_what_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FENNEL_TEST_MODE", "platform")
    monkeypatch.delenv("FENNEL_URL", raising=False)

    @testing.mock
    def test_z(client: Any) -> None:
        raise AssertionError("not reached")

    with pytest.raises(ClientError, match="FENNEL_URL"):
        test_z()


def test_an_unknown_mode_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FENNEL_TEST_MODE", "staging")
    monkeypatch.delenv("USE_INT_CLIENT", raising=False)
    with pytest.raises(ClientError, match="'platform'"):
        testing.current_mode()
