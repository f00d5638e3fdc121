"""The LocalClient's surface against the real services: preview, rejection, clones, checkout."""

from __future__ import annotations

import dataclasses

import pytest

from fennel_dagster.client import LocalClient
from fennel_dagster.commit.blueprint import BlueprintDiff
from fennel_dagster.commit.errors import (
    BranchExistsError,
    BranchNotFoundError,
    BranchNotSynced,
    CommitRejected,
    MainBranchDeletion,
)
from fennel_dagster.commit.protocol import StaleBranchError, commit
from fennel_dagster.declare import commit_spec
from fennel_dagster.mock import MockClient
from fennel_dagster.wire import spec
from tests.commit_protocol.invariants import assert_invariants, topics_of_head
from tests.commit_protocol.scenario import GRAPHS

pytestmark = pytest.mark.services


def test_preview_prints_the_diff_and_creates_nothing(
    client: LocalClient, schema: str, capsys: pytest.CaptureFixture[str]
) -> None:
    d = client.commit("v1", GRAPHS["v1"](), preview=True).outcome
    assert isinstance(d, BlueprintDiff) and d.create and not d.reuse and not d.release
    out = capsys.readouterr().out
    assert f"create   topic            {schema}.ds.T.v1." in out
    assert out.rstrip().endswith(
        f"{len(d.create)} to create, 0 to reuse, 0 unchanged, 0 to release"
    )
    assert client.physical.topics(f"{schema}.") == set()
    assert client.checkout("main") is None


def test_a_rejected_commit_lists_every_error_and_changes_nothing(
    client: LocalClient, schema: str
) -> None:
    client.commit("v1", GRAPHS["v1"]())
    with client.conn.transaction():
        before = client.conn.execute("SELECT hash, state FROM assets ORDER BY hash").fetchall()
    bad = commit_spec("no owners", GRAPHS["v2"]())
    bad = dataclasses.replace(
        bad, datasets=tuple(dataclasses.replace(d, meta=spec.MetaSpec()) for d in bad.datasets)
    )
    with pytest.raises(CommitRejected) as e:
        client.commit_spec(bad)
    assert str(e.value).splitlines()[0] == "commit rejected with 2 error(s):"
    with client.conn.transaction():
        after = client.conn.execute("SELECT hash, state FROM assets ORDER BY hash").fetchall()
    assert after == before  # nothing created, nothing released
    assert_invariants(client)  # and Kafka/S3 hold exactly the referenced assets


def test_clone_copies_references_only_and_branches_diverge(
    client: LocalClient, schema: str
) -> None:
    client.commit("v1", GRAPHS["v1"]())

    def bank_size() -> int:
        with client.conn.transaction():
            return client.conn.execute("SELECT count(*) FROM assets").fetchone()[0]  # type: ignore[index]

    before = bank_size()
    copied = client.clone_branch("exp").json()["refs"]
    assert copied > 0 and bank_size() == before  # references only: no asset created
    assert_invariants(client)
    client.commit("v2 on exp", GRAPHS["v2"](), branch="exp")
    assert {d.version for d in client.checkout("main").datasets} == {1}  # type: ignore[union-attr]
    assert {d.name: d.version for d in client.checkout("exp").datasets} == {"S": 2, "T": 1}  # type: ignore[union-attr]
    client.delete_branch("exp")
    assert_invariants(client)  # exp's own assets are gone, main's stay
    assert topics_of_head(client, "main") <= client.physical.topics(f"{schema}.")


def test_incremental_commit_keeps_what_it_does_not_mention(client: LocalClient) -> None:
    t, s, u = GRAPHS["v2+u"]()
    client.commit("v2", [t, s])
    client.commit("add U", [u], incremental=True)
    assert {d.name for d in client.checkout("main").datasets} == {"S", "T", "U"}  # type: ignore[union-attr]
    assert_invariants(client)


def test_a_commit_against_a_stale_head_fails_with_the_fix(client: LocalClient) -> None:
    client.commit("v1", GRAPHS["v1"]())
    result = client.server.process_spec(commit_spec("v2", GRAPHS["v2"]()), client.checkout("main"))
    with pytest.raises(
        StaleBranchError,
        match=r"branch 'main' moved to commit \d+ since this commit was prepared against 0: re-read the branch and commit again",
    ):
        commit(
            client.conn,
            client.lock_conn,
            client.physical,
            "main",
            result.blueprints,
            b"{}",
            "stale",
            expected_head=0,
        )


def test_checkout_with_init_creates_a_missing_branch_and_without_it_refuses(
    client: LocalClient,
) -> None:
    import pandas as pd

    client.checkout("fresh")  # a missing branch is only named, as Fennel's clients do
    assert "fresh" not in client.list_branches()
    with pytest.raises(Exception, match="fresh"):  # the next request says it does not exist
        client.log("hook", "t", pd.DataFrame({"uid": [1]}))
    assert client.checkout("fresh", init=True) is None  # created empty, checked out
    assert client.branch == "fresh" and "fresh" in client.list_branches()
    assert client.checkout("fresh", init=True) is None  # already there: just checked out


def test_log_sends_every_row_in_batches_of_batch_size_and_refuses_a_bad_one(
    client: LocalClient,
) -> None:
    import pandas as pd
    from confluent_kafka import Consumer, TopicPartition

    from fennel_dagster.errors import ClientError
    from fennel_dagster.metadata import registry

    client.commit("v1", GRAPHS["v1"]())
    rows = pd.DataFrame({"uid": [1, 2, 3, 4, 5], "amount": [1.0] * 5,
                         "ts": pd.date_range("2026-01-01", periods=5, freq="min", tz="UTC")})  # fmt: skip
    assert client.log("hook", "t", rows, batch_size=2).accepted == 5
    with client.conn.transaction():
        jobs = registry.branch_jobs(client.conn, client.branch, {})
    ((topic, partitions),) = registry.webhook_inboxes(jobs, "hook", "t").items()
    consumer = Consumer({"bootstrap.servers": client.settings.kafka_servers,
                         "group.id": "batch-size-test", "enable.auto.commit": False})  # fmt: skip
    try:
        ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                for p in range(partitions)]  # fmt: skip
    finally:
        consumer.close()
    assert sum(high - low for low, high in ends) == 5
    for bad in (0, -3):
        with pytest.raises(ClientError, match="batch_size"):
            client.log("hook", "t", rows, batch_size=bad)


def test_branch_errors_are_the_mocks_class_and_words(client: LocalClient) -> None:
    """Each refusal of a branch operation: the MockClient's class and text (Fennel's words),
    with the fix in ``hint``."""
    mock = MockClient()
    client.commit("v1", GRAPHS["v1"]())
    client.clone_branch("exp")
    mock.clone_branch("exp")
    refusals = [
        (lambda c: c.init_branch("main"), BranchExistsError, "Branch name: `main` already exists"),
        (lambda c: c.clone_branch("exp", from_branch="main"), BranchExistsError,
         "Branch `exp` already exists"),
        (lambda c: c.clone_branch("x", from_branch="gone"), BranchNotFoundError,
         "Branch `gone` does not exist"),
        (lambda c: c.delete_branch("main"), MainBranchDeletion, "Cannot delete the main branch."),
        (lambda c: c.delete_branch("gone"), BranchNotFoundError,
         "Branch name: gone does not exist"),
    ]  # fmt: skip
    for call, cls, words in refusals:
        for c in (client, mock):
            with pytest.raises(cls) as e:
                call(c)
            assert str(e.value) == words and e.value.hint, (c, words)
    assert sorted(client.list_branches()) == ["exp", "main"]  # nothing changed
    client.checkout("gone")  # a missing branch is only named, as Fennel's clients do
    with pytest.raises(BranchNotSynced) as e:  # the next request says it does not exist
        client.graph()
    assert str(e.value) == (
        '"Branch: `gone` not found, please sync this branch and try again. Available '
        "branches: ['exp', 'main']\""
    )
