"""Stream health (what the `stream_health` sensor observes) as the runners report it."""

from __future__ import annotations

import threading

import pytest

from fennel_dagster.engine.health import DatasetHealth, stream_health
from fennel_dagster.engine.runner import run_forever
from fennel_dagster.metadata import registry
from fennel_dagster.metadata.db import connect
from fennel_dagster.ops.rows import to_records
from fennel_dagster.settings import Settings
from tests.engine import repo
from tests.engine.harness import commit, produce_rows, read_topic, wait_for

pytestmark = pytest.mark.services


def spend_health(s: Settings) -> DatasetHealth:
    with connect(s, s.pg_schema, autocommit=True) as conn:
        found = {h.dataset: h for h in stream_health(conn) if h.branch == "main"}
    return found["Spend"]


def test_runners_report_rows_lag_errors_and_the_newest_event(engine_settings: Settings) -> None:
    s = engine_settings
    jobs = commit(s, repo.graph(f"{s.namespace}.raw"))
    pipe = jobs["pipeline:Spend"]
    produce_rows(s, pipe.spec.inputs[0].topic, to_records(repo.events(40)))
    before = spend_health(s)
    assert (before.rows, before.bad_rows, before.lag, before.newest_event) == (0, 0, None, None)
    assert before.running == 0 and before.partitions == pipe.partitions and not before.stopped
    # runners as engines and Dagster runs run them: with heartbeats, which carry the reports
    stop = threading.Event()
    runs = [threading.Thread(target=run_forever, args=(s, pipe, p, "health-test", stop))
            for p in range(pipe.partitions)]  # fmt: skip
    for t in runs:
        t.start()
    try:
        wait_for(lambda: spend_health(s).rows >= 40 and spend_health(s).lag == 0, 90, "reports")
        after = spend_health(s)
        assert after.running == pipe.partitions
    finally:
        stop.set()
        for t in runs:
            t.join(60)
    assert after.rows == len(read_topic(s, pipe.spec.output_topic, 4)) > 0
    assert after.bad_rows == 0
    newest = repo.events(40).ts.max()
    assert after.newest_event is not None and after.newest_event == newest.to_pydatetime()


def test_a_stopped_offline_writer_shows_in_its_datasets_health(engine_settings: Settings) -> None:
    s = engine_settings
    jobs = commit(s, repo.graph(f"{s.namespace}.raw"))
    offline = jobs["offline:Txn"]
    with connect(s, s.pg_schema, autocommit=True) as conn:
        registry.record_failure(conn, offline.hash, 0, "health-test", "the bucket is gone")
        txn = {h.dataset: h for h in stream_health(conn) if h.branch == "main"}["Txn"]
    assert txn.stopped == (f"{offline.name} p0: the bucket is gone",)
