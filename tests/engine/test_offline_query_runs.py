"""Offline queries as a user runs them: a request a Dagster run carries out (launched by the
sensor, on dagster-pyspark), its status and progress, a cancel before and during the run,
an input that does not exist, and a scheduled training-set asset (real Postgres, Kafka, S3
server, Spark)."""

from __future__ import annotations

import time
from typing import Any

import pandas as pd
import pytest
from dagster import AssetKey, ScheduleDefinition, build_sensor_context, materialize
from dagster_pyspark import LazyPySparkResource

from assets.offline_queries import fennel_offline_query, queries_key, training_set
from fennel_dagster import extractor, feature, featureset, inputs, meta, outputs
from fennel_dagster.batch.offline_runner import execute
from fennel_dagster.batch.spark import spark_conf
from fennel_dagster.client import LocalClient
from fennel_dagster.client.offline import OfflineQueryFailed
from fennel_dagster.mock import MockClient
from fennel_dagster.offline.exchange import read_frame, write_frame
from fennel_dagster.settings import Settings
from resources import FennelSettings, MetadataStore
from sensors.offline_queries import offline_query_requests
from tests.engine import repo
from tests.engine.harness import txn_with_history, wait_for

pytestmark = pytest.mark.services
OUTPUTS = ["SpendFeatures.total", "SpendFeatures.n", "SpendFeatures.big"]


def _featuresets(spend: Any) -> list[Any]:
    @meta(owner="offline@example.com")
    @featureset
    class SpendFeatures:
        uid: int
        total: float = feature(spend.total, default=0.0)
        n: int = feature(spend.n, default=0)
        big: bool

        @extractor(deps=[spend])
        @inputs("uid")
        @outputs("big")
        def big_spender(cls, ts: pd.Series, uid: pd.Series):
            got, found = spend.lookup(ts, uid=uid, fields=["total"])
            return pd.DataFrame({"big": (got["total"].where(found, 0.0) > 150.0).astype(bool)})

    @meta(owner="offline@example.com")
    @featureset
    class Slow:
        uid: int
        later: float

        @extractor
        @inputs("uid")
        @outputs("later")
        def wait(cls, ts: pd.Series, uid: pd.Series):
            import time as clock

            clock.sleep(120)  # long enough that only a cancel ends the query in time
            return pd.DataFrame({"later": uid.astype(float)})

    return [SpendFeatures, Slow]


def _spine(ev: pd.DataFrame) -> pd.DataFrame:
    stamps = ev["ts"].sort_values().iloc[::10].reset_index(drop=True) + pd.Timedelta(seconds=1)
    return pd.DataFrame({"SpendFeatures.uid": [i % 7 for i in range(len(stamps))], "at": stamps})


@pytest.fixture
def platform(engine_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Txn's history in its offline table, Spend derived from it, the featuresets committed."""
    s = engine_settings
    for key, value in s.as_env().items():  # Dagster resources read the settings from the env
        monkeypatch.setenv(key, value)
    ev = repo.events(300, keys=6, seed=4)
    datasets, _ = txn_with_history(s, ev)
    fsets = _featuresets(datasets[1])
    with LocalClient(s) as client:
        client.commit("features", datasets=datasets, featuresets=fsets)
    mock = MockClient()
    mock.commit("features", datasets=datasets, featuresets=fsets)
    mock.log(datasets[0], ev)
    return s, ev, mock


def _resources(s: Settings) -> dict[str, Any]:
    return {
        "fennel": FennelSettings(pg_schema=s.pg_schema, namespace=s.namespace),
        "metadata": MetadataStore(schema_name=s.pg_schema),
        "pyspark": LazyPySparkResource(spark_config=spark_conf(s)),
    }


def test_an_offline_query_is_a_dagster_run_launched_by_the_sensor(
    platform: Any, spark: Any
) -> None:
    s, ev, mock = platform
    spine = _spine(ev)
    with LocalClient(s, via_dagster=True) as client:
        pending = client.query_offline(["SpendFeatures.uid"], OUTPUTS, "at", input_dataframe=spine)
        assert isinstance(pending, dict) and pending["state"] == "pending"
        request_id = pending["request_id"]

        result = offline_query_requests(build_sensor_context(resources=_resources(s)))
        (run,) = result.run_requests  # type: ignore[union-attr]
        assert run.tags["fennel/offline-query"] == str(request_id)
        done = fennel_offline_query.execute_in_process(
            run_config=run.run_config, resources=_resources(s)
        )
        assert done.success
        (mat,) = [e.materialization for e in done.get_asset_materialization_events()]
        assert mat.asset_key == queries_key("main")
        assert mat.metadata["rows"].value == len(spine)

        st = client.track_offline_query(request_id)
        assert st["state"] == "done" and st["run_id"] == done.run_id
        assert st["progress"]["tasks_total"] > 0 and st["progress"]["step"]
        got = read_frame(s, st["result"]["output_uri"])
    want = mock.query_offline(["SpendFeatures.uid"], OUTPUTS, spine, "at")
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    assert got["SpendFeatures.big"].any() and not got["SpendFeatures.big"].all()


def test_cancel_a_pending_and_a_running_query_and_a_missing_input(
    platform: Any, spark: Any
) -> None:
    s, ev, _ = platform
    spine = _spine(ev).rename(columns={"SpendFeatures.uid": "Slow.uid"})
    with LocalClient(s, via_dagster=True) as client:
        pending = client.query_offline(["Slow.uid"], ["Slow.later"], "at", input_dataframe=spine)
        gone = client.cancel_offline_query(pending["request_id"])
        assert gone["state"] == "cancelled" and gone["cancel_requested"]
        assert execute(spark, s, pending["request_id"], "late run") is None  # never starts

    with LocalClient(s, spark=lambda: spark, on_progress=lambda line: None) as client:
        running = client.query_offline(["Slow.uid"], ["Slow.later"], "at", input_dataframe=spine)
        rid = running["request_id"]

        def started() -> bool:
            st = client.track_offline_query(rid)
            return st["state"] == "running" and (st["progress"] or {}).get("tasks_total", 0) > 0

        wait_for(started, 120, "the slow query's Spark tasks")
        t0 = time.monotonic()
        client.cancel_offline_query(rid)
        with pytest.raises(OfflineQueryFailed, match=f"offline query {rid} cancelled"):
            client.wait_offline_query(rid, timeout=100)
        assert time.monotonic() - t0 < 60  # the 120 s extractor was stopped, not waited for

        missing = f"s3://{s.s3_bucket}/{s.namespace}/no-such-spine/"
        with pytest.raises(OfflineQueryFailed, match=f"input {missing} does not exist"):
            client.query_offline(["Slow.uid"], ["Slow.later"], "at", input_s3=missing,
                                 wait=True)  # fmt: skip


def test_a_training_set_is_a_scheduled_asset(platform: Any, spark: Any) -> None:
    s, ev, mock = platform
    spine = _spine(ev).rename(columns={"SpendFeatures.uid": "user"})
    base = f"s3://{s.s3_bucket}/{s.namespace}/training"
    write_frame(s, f"{base}/spine.parquet", spine)
    defs = training_set(
        "spend", ["SpendFeatures.uid"], OUTPUTS, "at", input_s3=f"{base}/spine.parquet",
        output_s3=f"{base}/out", cron="0 3 * * *",
        feature_to_column_map={"SpendFeatures.uid": "user"},
    )  # fmt: skip
    training, schedule = defs
    assert isinstance(schedule, ScheduleDefinition) and schedule.cron_schedule == "0 3 * * *"
    result = materialize([training], resources=_resources(s))  # type: ignore[list-item]
    assert result.success
    (mat,) = [e.materialization for e in result.get_asset_materialization_events()]
    assert mat.asset_key == AssetKey(["main", "training", "spend"])
    assert mat.metadata["rows"].value == len(spine)
    want = mock.query_offline(
        ["SpendFeatures.uid"], OUTPUTS,
        spine.rename(columns={"user": "SpendFeatures.uid"}), "at",
    )  # fmt: skip
    pd.testing.assert_frame_equal(read_frame(s, f"{base}/out"), want, check_dtype=False)
