"""Three ways to commit through Dagster, one protocol: client request + sensor, a launched
job, and Dagster's GraphQL API — against `dagster dev` on the Postgres-backed instance."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster_graphql import DagsterGraphQLClient
from dagster_graphql.client.utils import DagsterGraphQLClientError

from examples.payments.datasets import DATASETS
from examples.payments.featuresets import FEATURESETS
from fennel_dagster.client import LocalClient
from fennel_dagster.commit.requests import CommitSummary
from fennel_dagster.dagster_home import prepare_dagster_home
from fennel_dagster.declare import commit_spec
from fennel_dagster.metadata.db import connect
from fennel_dagster.settings import Settings
from fennel_dagster.wire import encode
from tests.commit_protocol.scenario import graph
from tests.dagster.conftest import REPO, graphql

pytestmark = pytest.mark.services
ASSETS = "{ assetNodes { assetKey { path } dependencyKeys { path } } }"
LAST_MATERIALIZATION = """query($path: [String!]!) { assetOrError(assetKey: {path: $path}) {
  ... on Asset { assetMaterializations(limit: 1) { runId metadataEntries {
    label ... on IntMetadataEntry { intValue } } } } } }"""


def asset_paths(s: Settings) -> dict[str, set[str]]:
    nodes = graphql(s, ASSETS)["assetNodes"]
    return {"/".join(n["assetKey"]["path"]): {"/".join(d["path"]) for d in n["dependencyKeys"]}
            for n in nodes}  # fmt: skip


def run_config(branch: str, message: str, datasets: list) -> dict:  # type: ignore[type-arg]
    wire = encode(commit_spec(message, datasets, []))
    return {"ops": {"commit": {"config": {
        "branch": branch, "message": message, "wire_b64": base64.b64encode(wire).decode(),
    }}}}  # fmt: skip


def wait_run(client: DagsterGraphQLClient, run_id: str, timeout: float = 180) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = client.get_run_status(run_id).value
        if status in ("SUCCESS", "FAILURE", "CANCELED"):
            return str(status)
        time.sleep(1)
    raise AssertionError(f"run {run_id} did not finish")


def states(s: Settings, entity_prefix: str) -> dict[str, str]:
    with connect(s, s.pg_schema) as conn:
        rows = conn.execute(
            "SELECT name, state FROM assets WHERE entity LIKE %s AND kind = 'topic'",
            (entity_prefix + "%",),
        ).fetchall()
    return dict(rows)


def test_client_commit_through_the_commit_sensor_makes_the_assets_appear(
    dagster_dev: Settings,
) -> None:
    s = dagster_dev
    t0 = time.monotonic()
    with LocalClient(s, via_dagster=True) as client:
        result = client.commit("payments v1", datasets=DATASETS, featuresets=FEATURESETS)
    summary = result.outcome
    assert isinstance(summary, CommitSummary) and summary.created and summary.branch == "main"
    deadline = time.monotonic() + 60
    while "main/UserSpend" not in asset_paths(s):
        assert time.monotonic() < deadline, "assets did not appear after the commit"
        time.sleep(0.5)
    latency = time.monotonic() - t0
    paths = asset_paths(s)
    assert paths["main/UserSpend"] == {"main/EnrichedTransaction"}
    assert paths["main/EnrichedTransaction"] == {"main/Transaction", "main/Merchant", "main/User"}
    assert "main/UserSpend" in paths["main/UserFeatures"]
    print(f"\ncommit -> assets visible in the UI: {latency:.1f}s")


def test_graphql_commits_a_version_bump_and_destroys_the_old_assets_after_success(
    dagster_dev: Settings,
) -> None:
    s = dagster_dev
    gql = DagsterGraphQLClient(s.host, port_number=s.dagster_port)
    run = gql.submit_job_execution("fennel_commit", run_config=run_config("gql", "v1", graph(1)))
    assert wait_run(gql, run) == "SUCCESS"
    v1 = {n for n, st in states(s, "S").items() if ".v1." in n and st == "live"}
    assert v1
    # the commit run materialised what it committed: no "Never materialized" in the UI
    found = graphql(s, LAST_MATERIALIZATION, {"path": ["gql", "S"]})["assetOrError"]
    latest = found["assetMaterializations"][0]
    assert latest["runId"] == run
    assert {e["label"]: e.get("intValue") for e in latest["metadataEntries"]}["version"] == 1
    run = gql.submit_job_execution("fennel_commit", run_config=run_config("gql", "v2", graph(2)))
    assert wait_run(gql, run) == "SUCCESS"
    after = states(s, "S")
    assert all(after[n] == "destroyed" for n in v1)
    assert any(".v2." in n and st == "live" for n, st in after.items())
    # a rejected commit fails its run and records every validation error
    run = gql.submit_job_execution(
        "fennel_commit", run_config=run_config("gql", "drop S", graph(2)[:1])
    )
    assert wait_run(gql, run) == "FAILURE"
    with connect(s, s.pg_schema) as conn:
        state, result = conn.execute(
            "SELECT state, result FROM commit_requests WHERE run_id = %s", (run,)
        ).fetchone()  # type: ignore[misc]
    assert state == "rejected" and "without being marked deleted" in json.dumps(result)
    with pytest.raises(DagsterGraphQLClientError):
        gql.submit_job_execution("no_such_job", run_config={})


def test_dagster_job_launch_runs_a_commit_from_run_config(
    dagster_dev: Settings, tmp_path: Path
) -> None:
    s = dagster_dev
    cfg = tmp_path / "commit.json"
    cfg.write_text(json.dumps(run_config("cli", "from the CLI", graph(1))))
    env = {**os.environ, **s.as_env(), **prepare_dagster_home(s), "PYTHONPATH": str(REPO)}
    dagster = Path(sys.executable).with_name("dagster")
    out = subprocess.run(
        [str(dagster), "job", "launch", "-j", "fennel_commit", "-w", str(REPO / "workspace.yaml"),
         "--config-json", cfg.read_text()],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    deadline = time.monotonic() + 120
    while True:
        with connect(s, s.pg_schema) as conn:
            row = conn.execute(
                "SELECT state FROM commit_requests WHERE branch = 'cli' ORDER BY id DESC LIMIT 1"
            ).fetchone()
        if row is not None and row[0] == "committed":
            break
        assert time.monotonic() < deadline, f"CLI-launched commit not done: {row}"
        time.sleep(1)
