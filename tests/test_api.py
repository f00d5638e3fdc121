"""Client (HTTP), LocalClient and MockClient implement one interface, ``FennelClient``: same
methods, parameters and return types (mypy checks it too: ``fennel_dagster.clients``)."""

from __future__ import annotations

import inspect

import pytest

from fennel_dagster.api import Done, FennelClient, LogResult, Response, ResponseError, Unsupported
from fennel_dagster.client import Client, LocalClient
from fennel_dagster.mock import MockClient

# parameters only the platform has: which branch, and how long to wait on the network or for
# engines to serve a commit
PLATFORM_ONLY = {"branch", "timeout", "ready_timeout"}
METHODS = [m for m in dir(FennelClient) if not m.startswith("_")]


def _params(cls: type, name: str) -> list[tuple[str, object]]:
    sig = inspect.signature(getattr(cls, name))
    return [(p.name, p.default) for p in sig.parameters.values()
            if p.name != "self" and p.name not in PLATFORM_ONLY]  # fmt: skip


def test_the_protocol_has_fennels_client_methods() -> None:
    assert set(METHODS) >= {
        "commit", "log", "query", "query_offline", "lookup", "inspect", "erase", "init_branch",
        "clone_branch", "checkout", "delete_branch", "list_branches", "branch", "sleep",
        "get_dataset_df", "track_offline_query", "cancel_offline_query",
    }  # fmt: skip


@pytest.mark.parametrize("name", ["commit", "lookup", "query"])
def test_every_client_takes_the_same_parameters(name: str) -> None:
    assert _params(LocalClient, name) == _params(MockClient, name) == _params(Client, name)
    assert _params(LocalClient, name)[: len(_params(FennelClient, name))] == _params(
        FennelClient, name
    )


@pytest.mark.parametrize("name", METHODS)
def test_every_client_takes_the_protocols_parameters(name: str) -> None:
    want = [p for p, _ in _params(FennelClient, name)]
    for cls in (MockClient, LocalClient, Client):
        if name == "branch":  # a property whose value is also callable on two of them
            continue
        assert [p for p, _ in _params(cls, name)][: len(want)] == want, (cls, name)


@pytest.mark.parametrize("name", ["lookup", "query", "log", "commit", "init_branch",
                                  "clone_branch", "delete_branch", "inspect", "erase"])  # fmt: skip
def test_every_client_returns_the_same_types(name: str) -> None:
    want = inspect.signature(getattr(FennelClient, name)).return_annotation
    for cls in (LocalClient, Client, MockClient):
        got = inspect.signature(getattr(cls, name)).return_annotation
        assert got == want or (want == "Response" and got in ("Done", "LogResult")), (cls, got)


def test_every_client_is_a_fennel_client() -> None:
    assert isinstance(MockClient(), FennelClient)
    with Client("http://127.0.0.1:9", token="fdt_x_y") as http:
        assert isinstance(http, FennelClient)
    local = LocalClient.__new__(LocalClient)  # no connection: only its methods are looked at
    local.branch = "main"
    assert isinstance(local, FennelClient) and local.branch() == "main"


def test_one_response_type() -> None:
    done = Done("committed 'x'", details={"commit_id": 3})
    assert isinstance(done, Response) and done.ok and done.status_code == 200
    assert done.json() == {"message": "committed 'x'", "commit_id": 3}
    assert (
        done["status_code"] == 200 and done["body"] == done.json() and '"commit_id": 3' in done.text
    )
    done.raise_for_status()
    missing = Unsupported("no such thing")
    assert isinstance(missing, Response) and not missing.ok and missing["status_code"] == 404
    with pytest.raises(ResponseError, match="no such thing") as e:
        missing.raise_for_status()
    assert e.value.status == 404
    logged = LogResult(2)
    assert isinstance(logged, Response) and logged.ok and logged.json()["accepted"] == 2
    with pytest.raises(KeyError):
        done["nope"]
