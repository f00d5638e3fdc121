"""Stream health (what the `stream_health` sensor observes) as the runners report it."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import TopicPartition

from fennel_dagster.engine import kafka_clients
from fennel_dagster.engine.health import DatasetHealth, stream_health
from fennel_dagster.engine.runner import run_forever
from fennel_dagster.metadata import registry, stream_stats
from fennel_dagster.metadata.db import connect
from fennel_dagster.metadata.stream_stats import Progress
from fennel_dagster.ops.rows import to_records
from fennel_dagster.settings import Settings
from tests.engine import repo
from tests.engine.harness import (
    commit,
    create_topic,
    produce_raw,
    produce_rows,
    read_topic,
    wait_for,
)

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


def test_a_consumer_that_has_not_fetched_has_an_unknown_lag_not_0(
    engine_settings: Settings,
) -> None:
    s = engine_settings
    topic = f"{s.namespace}.lagged"
    create_topic(s, topic, 1)
    produce_raw(s, topic, [b"x"] * 5, partitions=1)
    c = kafka_clients.consumer(s, f"{s.namespace}.lag-test")
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        assert kafka_clients.lag(c) is None  # assigned at 0, nothing fetched: not caught up
        msg = None
        while msg is None:
            msg = c.poll(1.0)
        assert kafka_clients.lag(c) == 4
    finally:
        c.close()


def test_a_runner_never_reports_lag_0_before_it_has_read_its_backlog(
    engine_settings: Settings,
) -> None:
    s = engine_settings
    jobs = commit(s, repo.graph(f"{s.namespace}.raw"))
    pipe = jobs["pipeline:Spend"]
    produce_rows(s, pipe.spec.inputs[0].topic, to_records(repo.events(400)))
    seen: list[tuple[int, int | None, int]] = []  # (partition, lag, messages) as reported
    stop = threading.Event()
    runs = [threading.Thread(target=run_forever, args=(s, pipe, p, "health-test", stop))
            for p in range(pipe.partitions)]  # fmt: skip
    for t in runs:
        t.start()
    try:
        with connect(s, s.pg_schema, autocommit=True) as conn:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                stats = stream_stats.all_stats(conn)
                mine = [v for (h, _), v in stats.items() if h == pipe.hash]
                seen += [(v.partition, v.lag, v.messages) for v in mine]
                if sum(v.messages for v in mine) >= 400 and all(v.lag == 0 for v in mine):
                    break
                time.sleep(0.05)
        assert spend_health(s).lag == 0 and spend_health(s).caught_up
    finally:
        stop.set()
        for t in runs:
            t.join(60)
    # each partition's first report comes before its first fetch: unknown, never 0
    firsts = {p: lag for p, lag, _ in reversed(seen)}
    assert set(firsts) == set(range(pipe.partitions))
    assert all(lag is None for lag in firsts.values()), firsts
    behind = read_topic(s, pipe.spec.inputs[0].topic, 4)
    per = {p: sum(1 for q, _, _ in behind if q == p) for p in range(pipe.partitions)}
    wrong = [(p, n) for p, lag, n in seen if lag == 0 and n < per[p]]
    assert not wrong, f"caught up claimed before the backlog was read: {wrong}"


def test_an_unknown_or_missing_lag_is_never_caught_up(engine_settings: Settings) -> None:
    s = engine_settings
    pipe = commit(s, repo.graph(f"{s.namespace}.raw"))["pipeline:Spend"]
    with connect(s, s.pg_schema, autocommit=True) as conn:
        for p in range(pipe.partitions - 1):  # the last partition has not reported
            stream_stats.report(conn, pipe.hash, p, Progress(lag=0))
        h = spend_health(s)
        assert (h.lag, h.caught_up) == (None, False)
        stream_stats.report(conn, pipe.hash, pipe.partitions - 1, Progress(lag=0))
        h = spend_health(s)
        assert (h.lag, h.caught_up) == (0, True)
        # a restarted runner, not fetched yet, reports its lag unknown: not its last life's 0
        stream_stats.report(conn, pipe.hash, 0, Progress(lag=None))
        h = spend_health(s)
        assert (h.lag, h.caught_up) == (None, False)
