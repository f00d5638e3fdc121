"""Replay: a derived dataset's offline table recomputed on Spark from its inputs' offline
tables equals the engine's operators run by the mock, for all of history or a date range,
and replaying twice changes nothing (real Kafka, S3, Spark, Delta)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pandas as pd
import pytest

from fennel_dagster.batch.replay import Progress, ReplayError, replay
from fennel_dagster.metadata.db import connect
from fennel_dagster.metadata.registry import branch_jobs
from fennel_dagster.offline.table import DAY, OfflineTable
from fennel_dagster.ops.rows import to_records
from fennel_dagster.settings import Settings
from tests.engine import repo
from tests.engine.expected import mock_rows, mock_run
from tests.engine.harness import txn_with_history

pytestmark = pytest.mark.services
COLS = ["uid", "total", "n", "ts"]


def _multiset(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted(
        (r["uid"], round(float(r["total"]), 6), int(r["n"]), pd.Timestamp(r["ts"]).isoformat())
        for r in rows
    )


def test_replay_recomputes_history_and_a_date_range_on_spark(
    engine_settings: Settings, spark: Any
) -> None:
    s = engine_settings.with_(offline_flush_s=0.2)
    ev = repo.events(600, keys=10, seed=9)  # 30 s apart: about five hours over two days
    ev["ts"] = ev["ts"] + pd.Timedelta(hours=21)
    datasets, jobs = txn_with_history(s, ev)
    with connect(s, s.pg_schema) as conn:
        branch = branch_jobs(conn, "main")

    seen: list[Progress] = []
    report = replay(spark, s, branch, "Spend", on_progress=seen.append)
    want = _multiset(mock_rows(mock_run(datasets, ev), "Spend"))
    spend = OfflineTable(s, jobs["offline:Spend"].spec.table)  # type: ignore[union-attr]
    got = spend.read().to_pandas()
    assert report.rows == len(ev) == len(got)
    assert seen and all(0 <= p.tasks_done <= p.tasks_total for p in seen)  # the progress bar
    assert _multiset(to_records(got[COLS])) == want

    days = sorted(set(got[DAY]))
    assert len(days) == 2
    first = pd.Timestamp(days[0]).date()
    second = pd.Timestamp(days[1]).date()
    again = replay(spark, s, branch, "Spend", since=second, until=second + pd.Timedelta(days=1))
    assert again.rows == int((got[DAY] == days[1]).sum()) > 0
    after = spend.read().to_pandas()
    assert _multiset(to_records(after[COLS])) == want  # the range replaced, nothing doubled
    assert after[DAY].value_counts().to_dict() == got[DAY].value_counts().to_dict()
    assert first < second

    with pytest.raises(ReplayError, match="Txn has no pipeline: it is a source dataset"):
        replay(spark, s, branch, "Txn")

    cli = subprocess.run(
        [sys.executable, "-m", "fennel_dagster.cli.main", "backfill", "Spend", "--from", days[1]],
        env={**os.environ, **s.as_env()}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr[-2000:]
    assert f"Spend: {again.rows} rows recomputed for {days[1]} .. end" in cli.stdout
    assert _multiset(to_records(spend.read().to_pandas()[COLS])) == want
