"""Client (HTTP), LocalClient and MockClient implement one interface: same methods,
parameters and return types."""

from __future__ import annotations

import inspect

import pytest

from fennel_dagster.api import FeatureClient
from fennel_dagster.client import Client, LocalClient
from fennel_dagster.mock import MockClient

# parameters only the platform has: which branch, and how long to wait on the network
PLATFORM_ONLY = {"branch", "timeout"}


def _params(cls: type, name: str) -> list[tuple[str, object]]:
    sig = inspect.signature(getattr(cls, name))
    return [(p.name, p.default) for p in sig.parameters.values()
            if p.name != "self" and p.name not in PLATFORM_ONLY]  # fmt: skip


@pytest.mark.parametrize("name", ["commit", "lookup", "query"])
def test_every_client_takes_the_same_parameters(name: str) -> None:
    assert _params(LocalClient, name) == _params(MockClient, name) == _params(Client, name)
    assert _params(LocalClient, name)[: len(_params(FeatureClient, name))] == _params(
        FeatureClient, name
    )


@pytest.mark.parametrize("name", ["lookup", "query", "log"])
def test_every_client_returns_the_same_types(name: str) -> None:
    want = inspect.signature(getattr(FeatureClient, name)).return_annotation
    assert inspect.signature(getattr(LocalClient, name)).return_annotation == want
    assert inspect.signature(getattr(Client, name)).return_annotation == want
    assert inspect.signature(getattr(MockClient, name)).return_annotation == want


def test_the_mock_is_a_feature_client() -> None:
    assert isinstance(MockClient(), FeatureClient)
    assert all(callable(getattr(LocalClient, m)) for m in ("commit", "log", "lookup", "query"))
    with Client("http://127.0.0.1:9", token="fdt_x_y") as http:
        assert isinstance(http, FeatureClient)
