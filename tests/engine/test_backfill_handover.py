"""Backfill on commit: a new aggregate is computed on Spark from its input's offline table and
handed over to the stream engine at the pinned offsets while events keep arriving; the final
outputs, online state and offline table equal a clean run over all events, with no gap and
no duplicate (real Kafka, S3, Postgres, Spark, Delta)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pandas as pd
import pytest

from fennel_dagster.client import LocalClient
from fennel_dagster.commit.errors import BackfillRefused
from fennel_dagster.engine.hangar import Hangar
from fennel_dagster.engine.lookups import answer, partitions_of
from fennel_dagster.engine.runner import state_path
from fennel_dagster.metadata.db import connect
from fennel_dagster.metadata.registry import list_jobs
from fennel_dagster.offline.table import OfflineTable
from fennel_dagster.ops.rows import to_records
from fennel_dagster.settings import Settings
from fennel_dagster.wire import plan
from tests.engine import repo
from tests.engine.expected import mock_rows, mock_run
from tests.engine.harness import (
    Fleet,
    commit,
    create_topic,
    offline_writer,
    produce_rows,
    read_topic,
    table_rows,
    wait_for,
)

pytestmark = pytest.mark.services
COLS = ["uid", "total", "n", "ts"]


def _rows(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted(
        (int(r["uid"]), round(float(r["total"]), 6), int(r["n"]), pd.Timestamp(r["ts"]).isoformat())
        for r in records
    )


def test_a_commit_back_fills_a_new_aggregate_on_spark_and_hands_over_to_the_stream(
    engine_settings: Settings, spark: Any
) -> None:
    s = engine_settings.with_(offline_flush_s=0.2)
    raw = f"{s.namespace}.raw"
    create_topic(s, raw)
    datasets = repo.graph(raw)
    jobs = commit(s, datasets[:1])  # the source dataset only: its history accumulates
    txn = jobs["offline:Txn"]
    assert isinstance(txn.spec, plan.OfflineJobSpec)
    ev = repo.events(600, keys=10, seed=21)
    history, live = ev.iloc[:400], ev.iloc[400:]
    produce_rows(s, txn.spec.input_topic, to_records(history), by="uid")
    writer = offline_writer(s, txn)  # keeps writing Txn's table during the commit
    lines: list[str] = []
    try:
        table = OfflineTable(s, txn.spec.table)
        wait_for(lambda: len(table_rows(table)) >= 400, 90, "Txn's history in its table")

        with LocalClient(s, on_progress=lines.append) as client:
            with pytest.raises(BackfillRefused, match="would back-fill Spend.agg"):
                client.commit("add Spend", datasets=datasets, backfill=False)

        def stream() -> None:  # events keep arriving while the commit back-fills
            for part in range(4):
                produce_rows(s, txn.spec.input_topic,
                             to_records(live.iloc[part * 50:(part + 1) * 50]), by="uid")  # fmt: skip
                time.sleep(0.5)

        streaming = threading.Thread(target=stream)
        streaming.start()
        with LocalClient(s, on_progress=lines.append) as client:
            client._spark = spark
            client.commit("add Spend", datasets=datasets)
        streaming.join()
    finally:
        writer.terminate()
        writer.join(30)
    assert any(line.startswith("backfill Spend.agg on Spark from Txn v") for line in lines), lines
    done = [line for line in lines if line.startswith("backfill Spend.agg: ")]
    assert done and "history rows" in done[0], lines

    pipe = next(j for j in list_jobs_of(s) if j.kind == "pipeline")
    assert isinstance(pipe.spec, plan.PipelineJobSpec)
    seeded = read_topic(s, pipe.spec.output_topic, 4)
    assert 400 <= len(seeded) < 600  # history came from Spark, before any runner started

    fleet = Fleet(s)
    fleet.start(pipe)
    try:
        wait_for(lambda: len(read_topic(s, pipe.spec.output_topic, 4, timeout=5)) >= 600, 120,
                 "600 outputs")  # fmt: skip
        time.sleep(1.0)  # a duplicate would show up as a 601st row
    finally:
        runners = fleet.stop()
    outputs = read_topic(s, pipe.spec.output_topic, 4)
    mock = mock_run(datasets, ev)
    assert _rows([r for _, _, r in outputs]) == _rows(mock_rows(mock, "Spend"))  # no gap, no dup
    assert all(r.stats.restored_snapshot for r in runners)  # every partition started seeded
    # the stream processed only what came after the hand-over: each event once in stage 1 (a
    # message each), then stage 2 read them from the repartition topic in batch messages (at
    # least one, at most one a row). Had history been processed again, stage 1 alone would
    # have read more than twice as many.
    after = len(ev) - len(seeded)
    assert after < sum(r.stats.messages for r in runners) <= 2 * after

    keys = pd.DataFrame({"uid": list(range(10))})
    at = pd.Series([repo.T0 + pd.Timedelta(hours=6)] * 10)
    want, want_found = mock.lookup("Spend", keys, at)
    for i, part in enumerate(partitions_of(pipe, keys)):
        with Hangar(state_path(s, "test", pipe.name, part)) as h:
            got, found = answer(h, pipe, keys.iloc[[i]], at.iloc[[i]])
        assert bool(found.iloc[0]) == bool(want_found.iloc[i])
        assert got[["uid", "total", "n"]].astype(object).values.tolist() == \
            want.iloc[[i]][["uid", "total", "n"]].astype(object).values.tolist()  # fmt: skip

    spend = next(
        j for j in list_jobs_of(s) if j.kind == "offline" and j.spec.dataset.name == "Spend"
    )
    assert isinstance(spend.spec, plan.OfflineJobSpec)
    writer = offline_writer(s, spend)
    try:
        spend_table = OfflineTable(s, spend.spec.table)
        wait_for(lambda: len(table_rows(spend_table)) >= 600, 90, "Spend's offline table")
    finally:
        writer.terminate()
        writer.join(30)
    assert _rows(to_records(spend_table.read().to_pandas()[COLS])) == _rows(
        mock_rows(mock, "Spend")
    )


def list_jobs_of(s: Settings) -> list[Any]:
    with connect(s, s.pg_schema) as conn:
        return list_jobs(conn)
