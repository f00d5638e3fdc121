"""Committed definitions as Dagster assets: lineage, metadata, materialise = commit, checks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from dagster import AssetKey, materialize

from assets.datasets import branch_assets, expectation_checks, source_specs
from examples.payments.datasets import DATASETS
from examples.payments.featuresets import FEATURESETS
from fennel_dagster.client import LocalClient
from fennel_dagster.commit import catalog
from fennel_dagster.engine.partitioning import partition_of_record
from fennel_dagster.metadata.db import connect
from fennel_dagster.ops.rows import dumps
from fennel_dagster.settings import Settings
from resources import FennelSettings, KafkaResource
from tests.platform import drop_platform

pytestmark = pytest.mark.services


@pytest.fixture
def committed(live_stack: Settings, unique_name: str) -> Iterator[Settings]:
    s = live_stack.with_(pg_schema=unique_name, namespace=unique_name, partitions=1)
    with LocalClient(s) as c:
        c.commit("payments v1", datasets=DATASETS, featuresets=FEATURESETS)
    yield s
    drop_platform(s)


def load(s: Settings) -> catalog.BranchCatalog:
    with connect(s, s.pg_schema) as conn:
        (main,) = [c for c in catalog.load(conn) if c.branch == "main"]
    return main


def test_each_dataset_and_featureset_is_an_asset_with_lineage_and_metadata(
    committed: Settings,
) -> None:
    cat = load(committed)
    assets = branch_assets(cat)
    assert assets is not None
    specs = {s.key: s for s in assets.specs}
    k = lambda n: AssetKey(["main", n])  # noqa: E731
    assert set(specs) == {k(n) for n in ["Transaction", "User", "Merchant", "EnrichedTransaction",
                                         "UserSpend", "MerchantVolume", "UserFeatures", "TxnFeatures"]}  # fmt: skip
    deps = {s.key: {d.asset_key for d in s.deps} for s in assets.specs}
    sources = {s.key: s for s in source_specs(cat)}  # external assets: where lineage starts
    assert sources and all(s.key.path[1] == "source" for s in sources.values())
    assert {d for d in deps[k("Transaction")] if d in sources}, deps[k("Transaction")]
    assert deps[k("EnrichedTransaction")] == {k("Transaction"), k("Merchant"), k("User")}
    assert deps[k("UserSpend")] == {k("EnrichedTransaction")}
    assert k("UserSpend") in deps[k("UserFeatures")]
    us = specs[k("UserSpend")]
    assert us.group_name == "branch_main" and us.owners == ["payments@example.com"]
    assert "kafka" in us.kinds and "rocksdb" in us.kinds
    cols = {c.name: c.type for c in us.metadata["dagster/column_schema"].columns}
    assert cols["uid"] == "int" and "spend_7d" in cols
    assert us.metadata["topic"].startswith(f"{committed.namespace}.ds.UserSpend.v1.")
    assert us.metadata["partitions"] == 1 and us.metadata["ref count"] == 1
    assert us.metadata["blueprint hash"] and us.freshness_policy is not None
    txn = specs[k("Transaction")].metadata  # a source's event-time bounds, where users look
    assert txn["event time: disorder (s)"] > 0 and txn["event time: max_future (s)"] == 86400
    assert txn["event time: earliest"].startswith("1970-01-01")


def test_materialising_runs_the_commit_and_a_failing_expectation_fails_its_check(
    committed: Settings,
) -> None:
    cat = load(committed)
    assets = branch_assets(cat)
    checks = expectation_checks(cat)
    assert [c.check_specs for c in checks]  # Transaction has expectations
    # rows that break "amount between 0 and 50000 for 99%" in Transaction's topic
    topic = next(a.name for a in cat.of_dataset("Transaction") if a.role == "dataset")
    p = Producer({"bootstrap.servers": committed.kafka_servers})
    for i in range(50):
        rec = {"txn_id": i, "uid": 1, "merchant_id": 1, "amount": 900_000.0, "currency": "EUR",
               "channel": "pos", "ts": "2026-01-01T00:00:00+00:00"}  # fmt: skip
        raw = dumps(rec)
        key, part = partition_of_record(rec, [], 1, raw)
        p.produce(topic, raw, key, partition=part)
    p.flush(30)
    res = materialize(
        [assets, *checks],
        resources={
            "fennel": FennelSettings(pg_schema=committed.pg_schema, namespace=committed.namespace),
            "kafka": KafkaResource(),
        },  # fmt: skip
        raise_on_error=False,
    )
    mats = res.get_asset_materialization_events()
    assert mats and all(m.materialization.metadata["created"].value == 0 for m in mats)
    evals = {e.check_name: e for e in res.get_asset_check_evaluations()}
    assert not evals["expectations"].passed
    assert "expect_column_values_to_be_between" in evals["expectations"].description
