"""Offline tables as daily-partitioned Dagster assets: lineage from the dataset and its
inputs, and materialising a date range (what Dagster's backfill dialog launches: one run)
recomputes that range on Spark through dagster-pyspark (real Kafka, S3, Postgres, Spark)."""

from __future__ import annotations

import datetime as dt
import warnings
from typing import Any

import pandas as pd
import pytest
from dagster import AssetKey, BackfillPolicy, DailyPartitionsDefinition, materialize
from dagster._utils.warnings import BetaWarning
from dagster_pyspark import LazyPySparkResource

from assets.offline import offline_assets, offline_key
from fennel_dagster.batch.spark import spark_conf
from fennel_dagster.commit import catalog
from fennel_dagster.metadata.db import connect
from fennel_dagster.offline.table import DAY, OfflineTable
from fennel_dagster.ops.rows import to_records
from fennel_dagster.settings import Settings
from resources import FennelSettings
from tests.engine import repo
from tests.engine.expected import mock_rows, mock_run
from tests.engine.harness import txn_with_history
from tests.engine.test_replay import COLS, _multiset

pytestmark = pytest.mark.services


def test_a_date_range_of_an_offline_asset_materialises_as_one_spark_replay(
    engine_settings: Settings, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = engine_settings.with_(offline_flush_s=0.2)
    for key, value in s.as_env().items():  # the resources read the settings from the env
        monkeypatch.setenv(key, value)
    ev = repo.events(600, keys=8, seed=5)
    ev["ts"] = ev["ts"] + pd.Timedelta(hours=21)  # two event dates
    datasets, jobs = txn_with_history(s, ev)

    with connect(s, s.pg_schema) as conn:
        (main,) = [c for c in catalog.load(conn) if c.branch == "main"]
    with warnings.catch_warnings():  # the beta parameter it uses knowingly never greets a user
        warnings.simplefilter("error", BetaWarning)
        (spend,) = offline_assets(main, today=dt.date(2026, 1, 3))
    assert spend.key == offline_key("main", "Spend") == AssetKey(["main", "offline", "Spend"])
    deps = {k.to_user_string() for k in spend.asset_deps[spend.key]}
    assert deps == {"main/Spend", "main/Txn"}  # lineage: the dataset and its input
    parts = spend.partitions_def
    assert isinstance(parts, DailyPartitionsDefinition)
    first = dt.date(2026, 1, 3) - dt.timedelta(seconds=datasets[1].spec().history)
    assert parts.get_first_partition_key() == first.isoformat()  # history ago
    assert spend.backfill_policy is not None
    assert spend.backfill_policy == BackfillPolicy.single_run()

    days = sorted({t.date().isoformat() for t in ev["ts"]})
    assert len(days) == 2
    result = materialize(
        [spend],
        resources={
            "fennel": FennelSettings(pg_schema=s.pg_schema, namespace=s.namespace),
            "pyspark": LazyPySparkResource(spark_config=spark_conf(s)),
        },
        tags={
            "dagster/asset_partition_range_start": days[0],
            "dagster/asset_partition_range_end": days[1],
        },  # fmt: skip
    )
    assert result.success
    mats = [e.materialization for e in result.get_asset_materialization_events()]
    assert sorted(m.partition or "" for m in mats) == days  # one per date of the range
    meta = mats[0].metadata
    want = _multiset(mock_rows(mock_run(datasets, ev), "Spend"))
    table = OfflineTable(s, jobs["offline:Spend"].spec.table)  # type: ignore[union-attr]
    got = table.read().to_pandas()
    assert meta["rows"].value == len(got) == len(ev)
    assert meta["files"].value >= 2 and meta["bytes"].value > 0  # a file per date at least
    assert "tasks" in str(meta["spark stages"].value)
    assert sorted(set(got[DAY])) == days
    assert _multiset(to_records(got[COLS])) == want
