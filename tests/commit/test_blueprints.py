"""Blueprints: stable content hashes, shared across branches, changed by version bumps."""

from __future__ import annotations

import dataclasses

import pytest

from examples.payments import DATASETS, FEATURESETS
from fennel_dagster import commit_spec
from fennel_dagster.commit.blueprint import BlueprintSet
from fennel_dagster.commit.compiler import compile_blueprints, jobs_of
from fennel_dagster.commit.errors import CommitRejected
from fennel_dagster.commit.graph import EntityGraph
from fennel_dagster.commit.preview import diff, render
from fennel_dagster.commit.server import DefinitionServer
from fennel_dagster.wire import encode, plan, spec
from tests.commit_protocol.scenario import graph

OWNER = "team@example.com"


def blueprints(commit: spec.CommitSpec) -> BlueprintSet:
    return compile_blueprints(EntityGraph.build(commit))


def example() -> spec.CommitSpec:
    return commit_spec("v1", DATASETS, FEATURESETS)


def names(bs: BlueprintSet, entity: str) -> dict[str, str]:
    return {b.name: b.hash for b in bs.blueprints if b.entity.split("#")[0].split(".")[0] == entity}


GOLDEN_TOPICS = {
    # changed when topics got a deliberate max.message.bytes and sources their event-time bounds
    "Transaction": "e8addd2da80d7d7f14fa2624807271f84e6d6ac86df329c3023f574353e9cb22",
    "UserSpend": "ca432a9ef1e39abaf433489924f1b3871ddde1a05b5cc225249162446b7acbc0",
}


def test_golden_hashes_of_the_example_repo_are_stable() -> None:
    bs = blueprints(example())
    topics = {b.entity: b.hash for b in bs.of_kind("topic") if b.spec_dict()["role"] == "dataset"}
    assert {k: topics[k] for k in GOLDEN_TOPICS} == GOLDEN_TOPICS


def test_every_dataset_gets_its_topics_jobs_and_tables() -> None:
    bs = blueprints(example())
    us = [b for b in bs.blueprints if b.entity.startswith("UserSpend")]
    kinds = sorted((b.kind, b.spec_dict().get("role") or b.spec_dict().get("kind", "")) for b in us)
    # a terminal continuous aggregate is served from its pipeline job's state: no index job;
    # its offline writer fills the offline table from the dataset topic
    assert kinds == [
        ("job", "offline"), ("job", "pipeline"), ("offline_table", ""), ("snapshot_prefix", ""),
        ("topic", "dataset"), ("topic", "error"), ("topic", "repartition"), ("topic", "replaylog"),
    ]  # fmt: skip
    job = next(j for j in jobs_of(bs) if isinstance(j, plan.PipelineJobSpec)
               and j.dataset.name == "UserSpend")  # fmt: skip
    assert job.stateful and job.repartition is not None and job.repartition.keys == ("uid",)
    assert job.serves is not None and job.serves.scope == "UserSpend.agg"
    assert [s.topic for s in job.inputs] == [
        b.name
        for b in bs.of_kind("topic")
        if b.entity == "EnrichedTransaction" and b.spec_dict()["role"] == "dataset"
    ]
    for b in bs.of_kind("topic"):
        assert all(c.isalnum() or c in "._-" for c in b.name) and len(b.name) < 249


def test_unchanged_dataset_keeps_its_hash_and_cosmetics_do_not_matter() -> None:
    a = blueprints(example())
    renamed_owner = dataclasses.replace(
        example(),
        message="another message",
        datasets=tuple(
            dataclasses.replace(d, meta=spec.MetaSpec(owner="x@y.z", description="new"))
            for d in example().datasets
        ),
    )
    assert {b.hash for b in a.blueprints} == {b.hash for b in blueprints(renamed_owner).blueprints}


def spend(version: int, window: str) -> list[type]:
    return graph(version, window, offline=True)


def test_version_bump_changes_the_dataset_and_its_downstream_hashes_only() -> None:
    before = blueprints(commit_spec("v1", list(spend(1, "7d"))))
    after = blueprints(commit_spec("v2", list(spend(2, "30d"))))
    assert names(before, "T") == names(after, "T")
    changed = set(names(before, "S").values()) & set(names(after, "S").values())
    assert changed == set()


def test_isomorphic_datasets_on_two_branches_share_physical_assets() -> None:
    main = blueprints(commit_spec("main", list(spend(1, "7d"))))
    feature_branch = blueprints(
        commit_spec("from another branch, another message", list(spend(1, "7d")))
    )
    assert main == feature_branch


def test_preview_diff_lists_create_reuse_keep_and_release() -> None:
    v1 = blueprints(commit_spec("v1", list(spend(1, "7d"))))
    v2 = blueprints(commit_spec("v2", list(spend(2, "30d"))))
    alive_elsewhere = {b.hash for b in v2.blueprints if b.kind == "offline_table"}
    d = diff(v2, v1.blueprints, alive_elsewhere)
    assert {b.entity for b in d.keep} >= {"T"}
    assert all(b.entity.startswith("S") for b in d.create + d.release)
    assert [b.kind for b in d.reuse] == ["offline_table"]
    assert render(d).splitlines()[-1] == (
        f"  {len(d.create)} to create, 1 to reuse, {len(d.keep)} unchanged, {len(d.release)} to release"
    )


def test_definition_server_processes_wire_bytes_and_rejects_with_every_error() -> None:
    server = DefinitionServer()
    ok = server.process(encode(example()), None)
    assert ok.errors == () and len(ok.blueprints.blueprints) > 30
    bad = dataclasses.replace(
        example(),
        datasets=tuple(dataclasses.replace(d, meta=spec.MetaSpec()) for d in example().datasets),
    )
    result = server.process(encode(bad), None)
    assert len(result.errors) == len(example().datasets) and result.blueprints.blueprints == ()
    with pytest.raises(CommitRejected, match="6 error"):
        result.raise_for_errors()


def test_incremental_commit_keeps_entities_not_mentioned() -> None:
    server = DefinitionServer()
    T, S = spend(1, "7d")
    first = server.process_spec(commit_spec("v1", [T, S]), None).commit
    only_t = commit_spec("touch T", [T], incremental=True)
    result = server.process_spec(only_t, first)
    assert result.errors == ()
    assert [d.name for d in result.commit.datasets] == ["S", "T"]
