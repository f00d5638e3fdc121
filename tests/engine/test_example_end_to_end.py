"""The example repo end to end on the engine: commit, send events, look features up.

Merchants go through the webhook, transactions through the Kafka topic the source declares;
engines (supervisor + runner processes) ingest, join, aggregate and index; `LocalClient.lookup`
answers, and equals the mock client fed the same events.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import numpy as np
import pandas as pd
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from examples.payments.datasets import DATASETS
from examples.payments.events import generate
from examples.payments.featuresets import FEATURESETS
from fennel_dagster.client import LocalClient
from fennel_dagster.engine.supervisor import Supervisor
from fennel_dagster.metadata.db import connect
from fennel_dagster.metadata.registry import branch_jobs
from fennel_dagster.mock import MockClient
from fennel_dagster.offline.table import OfflineTable
from fennel_dagster.ops.rows import to_records
from fennel_dagster.settings import Settings
from fennel_dagster.wire import plan
from tests.engine.harness import wait_for

pytestmark = pytest.mark.services
TOPIC = "transactions"  # as declared by examples/payments


def fresh_topic(s: Settings, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": s.kafka_servers})
    if TOPIC in admin.list_topics(timeout=10).topics:
        for f in admin.delete_topics([TOPIC]).values():
            f.result(30)
        wait_for(lambda: TOPIC not in admin.list_topics(timeout=10).topics, 30, "topic deletion")
    deadline = time.monotonic() + 30
    while True:
        try:
            for f in admin.create_topics([NewTopic(TOPIC, partitions, 1)]).values():
                f.result(30)
            return
        except Exception:  # noqa: BLE001 - deletion may still be settling
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


INPUTS = ["UserFeatures.uid", "TxnFeatures.uid", "TxnFeatures.merchant_id", "TxnFeatures.amount"]
OUTPUTS = ["UserFeatures", "TxnFeatures"]


def _spine(ev: Any, rows: int = 80) -> pd.DataFrame:
    """Rows at random seconds from before the first event to a day after the last."""
    rng = np.random.default_rng(11)
    start = ev.transactions.ts.min() - pd.Timedelta(hours=1)
    span = int((ev.transactions.ts.max() - start).total_seconds()) + 86400
    uid = rng.choice(sorted(ev.transactions.uid.unique()), rows)
    return pd.DataFrame({
        "UserFeatures.uid": uid, "TxnFeatures.uid": uid,
        "TxnFeatures.merchant_id": rng.choice(ev.merchants.merchant_id.to_numpy(), rows),
        "TxnFeatures.amount": rng.integers(1, 500, rows).astype(float),
        "ts": [start + pd.Timedelta(seconds=int(x)) for x in rng.integers(0, span, rows)],
    })  # fmt: skip


def _cells(col: pd.Series) -> list[Any]:
    def norm(v: Any) -> Any:
        if isinstance(v, np.ndarray | list):
            return [norm(x) for x in v]
        if isinstance(v, float | np.floating):
            return None if np.isnan(v) else round(float(v), 6)
        if isinstance(v, np.generic):
            return v.item()
        return None if v is None or v is pd.NA else v

    return [norm(v) for v in col.tolist()]


def _wait_offline_tables(s: Settings, rows: dict[str, int]) -> None:
    """Until the engines' offline writers have put ``rows`` rows in each dataset's table."""
    with connect(s, s.pg_schema) as conn:
        jobs = branch_jobs(conn, "main")
    tables = {j.spec.dataset.name: OfflineTable(s, j.spec.table) for j in jobs
              if isinstance(j.spec, plan.OfflineJobSpec)}  # fmt: skip
    for name, n in rows.items():
        wait_for(lambda t=tables[name], n=n: t.read([t.dataset.timestamp]).num_rows >= n,
                 180, f"{name}'s offline table")  # fmt: skip


def lookup_all(client: LocalClient, dataset: str, keys: pd.DataFrame, at: pd.Series):  # type: ignore[no-untyped-def]
    """A lookup, or None while the engines' runners are still starting (slow on a busy box)."""
    try:
        return client.lookup(dataset, keys, timestamps=at)
    except LookupError:
        return None


def test_example_repo_on_the_engine_answers_lookups_like_the_mock(
    engine_settings: Settings, spark: Any
) -> None:
    """... and ``query_offline`` on Spark, from the offline tables the engines wrote, gives
    every featureset's features as ``query`` does online at the same timestamps."""
    s = engine_settings.with_(partitions=2)
    fresh_topic(s, 2)
    ev = generate(n_users=15, n_merchants=8, n_transactions=400, days=3)
    with LocalClient(s) as client:
        client.commit("payments", datasets=DATASETS, featuresets=FEATURESETS)
    sup = Supervisor(s, engine_id="e2e")
    sup.start_lookups()
    t = threading.Thread(target=sup.serve, daemon=True)
    t.start()
    try:
        with LocalClient(s) as client:
            assert client.log("ops_webhook", "merchants", ev.merchants).accepted == 8
            assert client.log("ops_webhook", "users", ev.users).accepted == 15
            mids = pd.DataFrame({"merchant_id": ev.merchants.merchant_id})
            later = pd.Series([ev.transactions.ts.max()] * len(mids))

            def merchants_indexed() -> bool:
                res = lookup_all(client, "Merchant", mids, later)
                return res is not None and bool(res[1].all())

            wait_for(merchants_indexed, 300, "merchants indexed")
            time.sleep(3)  # the enrich job indexes the same rows from the same topic
            p = Producer({"bootstrap.servers": s.kafka_servers})
            for rec in to_records(ev.transactions):
                p.produce(TOPIC, json.dumps(rec).encode(), partition=rec["uid"] % 2)
            assert p.flush(30) == 0

            uids = pd.DataFrame({"uid": sorted(ev.transactions.uid.unique())})
            end = pd.Series([ev.transactions.ts.max() + pd.Timedelta(minutes=1)] * len(uids))

            def all_counted() -> bool:
                res = lookup_all(client, "UserSpend", uids, end)
                if res is None:
                    return False
                df, found = res
                return bool(found.all()) and int(df.txns_forever.sum()) == len(ev.transactions)

            wait_for(all_counted, 300, "every transaction aggregated")
            got, found = client.lookup("UserSpend", uids, timestamps=end)
            feats = client.query(["UserFeatures.uid"], ["UserFeatures"],
                                 uids.rename(columns={"uid": "UserFeatures.uid"}), end)  # fmt: skip
            spine = _spine(ev)
            online = client.query(INPUTS, OUTPUTS, spine.drop(columns=["ts"]), spine["ts"])
            _wait_offline_tables(s, {"User": 15, "EnrichedTransaction": len(ev.transactions)})
        with LocalClient(s, spark=lambda: spark) as client:
            offline = client.query_offline(INPUTS, OUTPUTS, "ts", input_dataframe=spine, wait=True)
            assert isinstance(offline, pd.DataFrame)
            assert list(offline.columns) == [*online.columns, "ts"]
            assert offline["ts"].tolist() == spine["ts"].tolist()
            for c in online.columns:  # row for row, every feature of both featuresets
                assert _cells(offline[c]) == _cells(online[c]), c
    finally:
        sup.stop()
        t.join(120)

    mock = MockClient()
    mock.commit("payments", datasets=DATASETS, featuresets=FEATURESETS)
    mock.log("ops_webhook", "merchants", ev.merchants)
    mock.log("ops_webhook", "users", ev.users)
    mock.log("Transaction", ev.transactions)
    want, want_found = mock.lookup("UserSpend", uids, end)
    # one serving path: the same extractors and lookups give the same features on both
    want_feats = mock.query(["UserFeatures.uid"], ["UserFeatures"],
                            uids.rename(columns={"uid": "UserFeatures.uid"}), end)  # fmt: skip
    pd.testing.assert_frame_equal(feats, want_feats, check_dtype=False)
    assert found.tolist() == want_found.tolist()
    cols = ["uid", "txns_1h", "txns_forever", "web_txns_7d", "recent_merchants", "categories_7d"]
    assert to_records(got[cols]) == to_records(want[cols])
    for c in ["spend_7d", "avg_txn_7d", "max_txn_7d"]:
        assert got[c].astype(float).round(6).tolist() == want[c].astype(float).round(6).tolist()
