"""Crash the commit at every named point (SIGKILL of the committing process), recover, and
check the invariants; then the same commit, retried, succeeds.

The commit under test creates (dataset U), reuses (S v2, already created by branch ``exp``),
keeps (T) and destroys (S v1, referenced by nobody else) assets at once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from fennel_dagster.client import LocalClient
from fennel_dagster.commit import crashpoints
from fennel_dagster.commit.physical import AssetStoreError, PhysicalAssets
from fennel_dagster.commit.protocol import MetadataUnavailableError
from fennel_dagster.settings import Settings
from tests.commit_protocol.invariants import assert_invariants, topics_of_head
from tests.commit_protocol.scenario import GRAPHS, settings_for

pytestmark = pytest.mark.services
REPO = Path(__file__).resolve().parents[2]


def prepare(client: LocalClient) -> set[str]:
    client.commit("v1", GRAPHS["v1"]())
    client.clone_branch("exp")
    client.commit("v2 on exp", GRAPHS["v2"](), branch="exp")
    assert_invariants(client)
    return topics_of_head(client, "main")


def commit_in_child(
    schema: str, branch: str, graph: str, crash_at: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if crash_at:
        env |= {"FENNEL_CRASH_AT": crash_at, "FENNEL_CRASH_MODE": "kill"}
    return subprocess.run(
        [sys.executable, "-m", "tests.commit_protocol.scenario", schema, branch, graph],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


POINTS = [p for p in crashpoints.POINTS if p != "after_recovery"] + ["after_create_asset@2"]


@pytest.mark.parametrize("point", POINTS)
def test_crash_at_every_point_recovers_to_old_or_new_graph(
    client: LocalClient, schema: str, point: str
) -> None:
    old_topics = prepare(client)
    with client.conn.transaction():
        old_head = client.conn.execute("SELECT head FROM branches WHERE name = 'main'").fetchone()
    crashed = commit_in_child(schema, "main", "v2+u", crash_at=point)
    assert crashed.returncode == -9, (
        f"expected a SIGKILL at {point}: {crashed.stdout}{crashed.stderr}"
    )

    client.recover()
    assert_invariants(client)
    with client.conn.transaction():
        new_head = client.conn.execute("SELECT head FROM branches WHERE name = 'main'").fetchone()
    landed = new_head != old_head
    assert landed == (
        point
        in (
            "after_commit_point",
            "before_destroy_asset",
            "after_destroy_asset",
            "after_destructions",
        )
    )
    if not landed:  # nothing the old graph referenced was destroyed
        assert old_topics <= client.physical.topics(f"{schema}.")

    retried = commit_in_child(schema, "main", "v2+u")
    assert retried.returncode == 0, retried.stderr
    assert_invariants(client)
    assert {d.name for d in client.checkout("main").datasets} == {"S", "T", "U"}  # type: ignore[union-attr]


def test_kafka_unavailable_fails_clearly_and_leaves_no_stray_asset(
    client: LocalClient, schema: str
) -> None:
    prepare(client)
    dead = settings_for(schema).model_copy(update={"kafka_bootstrap": "127.0.0.1:1"})
    with LocalClient(dead) as broken:
        broken.physical = PhysicalAssets(dead, attempts=2)
        with pytest.raises(
            AssetStoreError,
            match=r"creating Kafka topic .* \(broker 127\.0\.0\.1:1\) failed after 2 attempts",
        ):
            broken.commit("v2+u with Kafka down", GRAPHS["v2+u"]())
    client.recover()
    assert_invariants(client)
    assert {d.name for d in client.checkout("main").datasets} == {"S", "T"}  # type: ignore[union-attr]


def test_dropped_postgres_connection_fails_clearly_and_recovery_cleans_up(
    client: LocalClient, schema: str
) -> None:
    prepare(client)
    with LocalClient(settings_for(schema)) as victim:
        backend = victim.conn.info.backend_pid

        def drop_connection() -> None:
            with psycopg.connect(Settings().pg_dsn(), autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (backend,))

        crashpoints.arm("after_create_asset@1", drop_connection)
        try:
            with pytest.raises(
                MetadataUnavailableError,
                match="lost the connection to the metadata store while committing to 'main'",
            ):
                victim.commit("v2+u", GRAPHS["v2+u"]())
        finally:
            crashpoints.disarm()
    client.recover()
    assert_invariants(client)
    assert {d.name for d in client.checkout("main").datasets} == {"S", "T"}  # type: ignore[union-attr]


def test_two_processes_committing_to_one_branch_lose_no_update(
    client: LocalClient, schema: str
) -> None:
    prepare(client)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen([sys.executable, "-m", "tests.commit_protocol.scenario", schema, "main", g],
                         cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for g in ("v2+u", "v3")
    ]  # fmt: skip
    results = [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
    wins = [r for r in results if r[0] == 0]
    losses = [r for r in results if r[0] != 0]
    assert wins, results
    for _, _, err in losses:
        # the loser either saw the branch move under it, or was validated against the
        # winner's graph (which it may contradict): a clean failure either way
        last = err.strip().splitlines()[-1]
        assert ("StaleBranchError" in err and "commit again" in last) or "commit rejected" in err, (
            err
        )
    with client.conn.transaction():
        chain = client.conn.execute(
            "SELECT id, parent FROM commits WHERE branch = 'main' ORDER BY id"
        ).fetchall()
    for (prev_id, _), (_, parent) in zip(chain, chain[1:], strict=False):
        assert parent == prev_id  # every commit was made on top of the one before: no lost update
    assert_invariants(client)
