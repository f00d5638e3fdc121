"""A version bump back-fills the new version on Spark while the old one keeps serving; at the
commit point the new one takes over and the old assets are destroyed through the two-ledger
protocol (real Kafka, S3, Postgres, Spark; engines under a Supervisor)."""

from __future__ import annotations

import threading
from typing import Any

import pandas as pd
import pytest

from fennel_dagster.client import LocalClient
from fennel_dagster.engine.supervisor import Supervisor
from fennel_dagster.metadata.db import connect
from fennel_dagster.metadata.registry import branch_jobs
from fennel_dagster.offline.table import OfflineTable
from fennel_dagster.ops.rows import to_records
from fennel_dagster.settings import Settings
from fennel_dagster.wire import plan
from tests.engine import repo
from tests.engine.expected import as_multiset, mock_rows, mock_run
from tests.engine.harness import (
    commit,
    create_topic,
    produce_rows,
    read_topic,
    table_rows,
    wait_for,
)

pytestmark = pytest.mark.services
KEYS = pd.DataFrame({"uid": list(range(10))})
COLS = ["uid", "total", "n", "ts"]


def _spend_jobs(s: Settings) -> list[Any]:
    with connect(s, s.pg_schema) as conn:
        return [j for j in branch_jobs(conn, "main") if j.spec.dataset.name == "Spend"]


def _topic_states(s: Settings, version: int) -> dict[str, str]:
    with connect(s, s.pg_schema) as conn:
        rows = conn.execute(
            "SELECT name, state FROM assets WHERE entity LIKE 'Spend%%' AND kind = 'topic' "
            "AND name LIKE %s", (f"%.Spend.v{version}.%",),
        ).fetchall()  # fmt: skip
    return dict(rows)


def _lookup(s: Settings, at: pd.Timestamp) -> pd.DataFrame:
    with LocalClient(s) as c:
        rows, found = c.lookup("Spend", KEYS, pd.Series([at] * len(KEYS)))
    assert found.all()
    return rows[["uid", "total", "n"]].astype(object)


def test_a_version_bump_back_fills_while_the_old_version_serves(
    engine_settings: Settings, spark: Any
) -> None:
    s = engine_settings.with_(offline_flush_s=0.2, engine_snapshot_interval_s=3600.0)
    raw = f"{s.namespace}.raw"
    create_topic(s, raw)
    v1 = repo.graph(raw)
    jobs = commit(s, v1)
    txn = jobs["offline:Txn"]
    assert isinstance(txn.spec, plan.OfflineJobSpec)
    ev = repo.events(500, keys=10, seed=3)
    at = repo.T0 + pd.Timedelta(hours=5)
    sup = Supervisor(s, engine_id="engine-vb")
    sup.start_lookups()
    serving = threading.Thread(target=sup.serve, daemon=True)
    serving.start()
    try:
        produce_rows(s, txn.spec.input_topic, to_records(ev.iloc[:400]), by="uid")
        v1_out = jobs["pipeline:Spend"].spec.output_topic  # type: ignore[union-attr]
        wait_for(lambda: len(read_topic(s, v1_out, 4, timeout=5)) >= 400, 120, "v1's outputs")
        wait_for(lambda: len(table_rows(OfflineTable(s, txn.spec.table))) >= 400, 60,
                 "Txn's offline table")  # fmt: skip
        old = _lookup(s, at)
        v1_mock = mock_run(v1, ev.iloc[:400])
        want_old, _ = v1_mock.lookup("Spend", KEYS, pd.Series([at] * len(KEYS)))
        assert old.values.tolist() == want_old[["uid", "total", "n"]].astype(object).values.tolist()

        during: dict[str, Any] = {}

        def on_progress(line: str) -> None:
            if line.startswith("backfill Spend.agg on Spark") and not during:
                # before the commit point: v1 is the branch's Spend and still answers
                during["jobs"] = [j.spec.dataset.version for j in _spend_jobs(s)]
                during["lookup"] = _lookup(s, at)
                during["v2 topics"] = _topic_states(s, 2)

        v2 = repo.graph(raw, spend_version=2, window="2h")
        with LocalClient(s, on_progress=on_progress) as client:
            client._spark = spark
            client.commit("Spend v2: a 2h window", datasets=v2)
        assert set(during["jobs"]) == {1}
        assert during["lookup"].values.tolist() == old.values.tolist()
        assert during["v2 topics"] and set(during["v2 topics"].values()) == {"creating"}

        # after the commit point: v1's assets were destroyed, v2 serves (seeded, then live)
        assert set(_topic_states(s, 1).values()) == {"destroyed"}
        assert {j.spec.dataset.version for j in _spend_jobs(s)} == {2}
        produce_rows(s, txn.spec.input_topic, to_records(ev.iloc[400:]), by="uid")
        pipe2 = next(j for j in _spend_jobs(s) if j.kind == "pipeline")
        wait_for(lambda: len(read_topic(s, pipe2.spec.output_topic, 4, timeout=5)) >= 500, 120,
                 "v2's outputs")  # fmt: skip
        v2_mock = mock_run(v2, ev)
        got = read_topic(s, pipe2.spec.output_topic, 4)
        assert as_multiset([r for _, _, r in got], COLS) == as_multiset(
            mock_rows(v2_mock, "Spend"), COLS
        )
        want_new, _ = v2_mock.lookup("Spend", KEYS, pd.Series([at] * len(KEYS)))
        wait_for(lambda: _lookup(s, at).values.tolist()
                 == want_new[["uid", "total", "n"]].astype(object).values.tolist(), 60,
                 "v2's lookups")  # fmt: skip
    finally:
        sup.stop()
        serving.join(120)
