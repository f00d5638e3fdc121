"""A `dagster dev` (webserver + daemon) on the Postgres-backed instance, per test module."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fennel_dagster.client import Client
from fennel_dagster.dagster_home import prepare_dagster_home
from fennel_dagster.metadata.db import connect
from fennel_dagster.settings import Settings
from fennel_dagster.stack.process import port_open, wait_for

REPO = Path(__file__).resolve().parents[2]


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
    env = {**os.environ, **s.as_env(), **prepare_dagster_home(s), "PYTHONPATH": str(REPO)}
    log = (home / "dagster.log").open("w")
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("fennel-dagster")), "dev"], cwd=REPO, env=env,
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        assert wait_for(lambda: port_open(s.host, s.dagster_port), 180, interval=1.0)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                graphql(s, "{ version }")
                break
            except Exception:  # noqa: BLE001 - still loading the code location
                time.sleep(1)
        yield s
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
        with Client(s) as c:
            c.recover()
            for b in c.list_branches():
                c.delete_branch(b)
        with connect(s) as conn:
            conn.execute(f"DROP SCHEMA {name} CASCADE")
            conn.commit()
