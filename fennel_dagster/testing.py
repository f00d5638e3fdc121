"""Fennel's ``fennel.testing``: the ``@mock`` decorator, ``log``, ``MockClient``.

A test decorated with ``@mock`` takes a ``client`` argument. By default it is a fresh
``MockClient`` (in-process, synchronous). In integration mode, ``FENNEL_TEST_MODE=platform``
(or Fennel's ``USE_INT_CLIENT=1``), it is the HTTP ``Client(FENNEL_URL, FENNEL_TOKEN)`` of a
real deployment, checked out on a fresh branch of its own that is deleted when the test
ends, pass or fail (with any branch the test itself created). ``client.is_integration_client()``
tells the test which it got; ``client.sleep()`` waits for the deployment's jobs to process
what the test logged (a no-op on the mock).

Fennel's own ``@mock`` runs a test on the mock and then, with ``USE_INT_CLIENT=1``, again
on its integration client; here the mode picks one.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd

from fennel_dagster.client.http import Client
from fennel_dagster.declare.lookup import serve_outside_runs
from fennel_dagster.errors import ClientError
from fennel_dagster.mock import InternalTestClient, MockClient, almost_equal, log

MODE_ENV = "FENNEL_TEST_MODE"
FENNEL_ALIAS_ENV = "USE_INT_CLIENT"  # Fennel's switch to its integration client
PLATFORM = "platform"
MOCK = "mock"


def current_mode() -> str:
    """``platform`` when ``FENNEL_TEST_MODE=platform`` or ``USE_INT_CLIENT=1``, else ``mock``."""
    mode = os.environ.get(MODE_ENV, "").strip().lower()
    if mode == PLATFORM or os.environ.get(FENNEL_ALIAS_ENV, "").strip() == "1":
        return PLATFORM
    if mode not in ("", MOCK, "inmemory"):  # inmemory: Fennel's name for its default
        raise ClientError(
            f"{MODE_ENV}={mode!r}: expected {PLATFORM!r} (a deployment at FENNEL_URL) or "
            f"{MOCK!r} (the default)"
        )
    return MOCK


def platform_client() -> Client:
    """The HTTP client of the deployment named by ``FENNEL_URL`` and ``FENNEL_TOKEN``."""
    url = os.environ.get("FENNEL_URL")
    if not url:
        raise ClientError(
            f"{MODE_ENV}=platform needs FENNEL_URL (the query server, e.g. "
            "http://localhost:8081) and FENNEL_TOKEN (a token with commit scope)"
        )
    return Client(url, os.environ.get("FENNEL_TOKEN") or None)


def branch_name(test_name: str) -> str:
    """A fresh branch name for one run of a test: its name, then a random suffix."""
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", test_name).strip("-")[:40] or "test"
    return f"it-{stem}-{uuid.uuid4().hex[:8]}"


@contextlib.contextmanager
def integration_branch(client: Client, test_name: str) -> Iterator[Client]:
    """``client`` checked out on a fresh branch, deleted afterwards (also when the test
    fails), with every branch the test created."""
    before = set(client.list_branches())
    name = branch_name(test_name)
    client.init_branch(name)
    serve_outside_runs(functools.partial(_lookup, client))  # Dataset.lookup in the test
    failed = True
    try:
        yield client
        failed = False
    finally:
        created = sorted((set(client.list_branches()) - before) | {name})
        errors = []
        for b in created:
            try:
                client.delete_branch(b)
            except ClientError as e:
                errors.append(f"{b}: {e}")
        client.close()
        if errors and not failed:  # a failing test's own error is the one to see
            raise ClientError(f"could not delete the test's branches: {'; '.join(errors)}")


def _lookup(
    client: Client, name: str, ts: pd.Series, keys: pd.DataFrame, fields: list[str] | None
) -> tuple[pd.DataFrame, pd.Series]:
    """``Dataset.lookup`` outside an extractor, answered by the deployment on the test's
    branch (Fennel's integration client does the same)."""
    data, found = client.lookup(name, keys, ts)
    frame = pd.DataFrame(data)
    return (frame[fields] if fields else frame), found


def mock(test: Callable[..., Any]) -> Callable[..., Any]:
    """``@mock`` on a test: passes ``client`` — a fresh ``MockClient``, or in integration
    mode the deployment's HTTP client on a fresh branch (see the module's docstring)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> Any:
        if current_mode() == PLATFORM:
            with integration_branch(platform_client(), test.__name__) as client:
                return test(*args, client=client, **kwargs)
        return test(*args, client=MockClient(), **kwargs)

    sig = inspect.signature(test)
    run.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[p for p in sig.parameters.values() if p.name != "client"]
    )
    return run


__all__ = [
    "InternalTestClient",
    "MockClient",
    "almost_equal",
    "branch_name",
    "integration_branch",
    "log",
    "mock",
    "platform_client",
    "current_mode",
]
