"""A `dagster dev` (webserver + daemon) on the Postgres-backed instance, per test module."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from fennel_dagster.settings import Settings
from tests.platform import REPO, drop_platform
from tests.platform import dagster_dev as run_dagster_dev

__all__ = ["REPO", "graphql"]


def graphql(s: Settings, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    req = urllib.request.Request(
        f"http://{s.host}:{s.dagster_port}/graphql", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        out = json.loads(resp.read())
    assert "errors" not in out, out
    return out["data"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def dagster_dev(
    live_stack: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Settings]:
    name = f"d{uuid.uuid4().hex[:10]}"
    home = tmp_path_factory.mktemp("dagster")
    s = live_stack.with_(
        pg_schema=name, namespace=name, partitions=1, dagster_home=home,
        dagster_port=live_stack.dagster_port + 394, dagster_engine=False,
    )  # fmt: skip
    with run_dagster_dev(s, home / "dagster.log"):
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                graphql(s, "{ version }")
                break
            except Exception:  # noqa: BLE001 - still loading the code location
                time.sleep(1)
        yield s
    drop_platform(s)
