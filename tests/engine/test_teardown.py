"""A branch deletion settles in seconds: the supervisor stops the deleted jobs' runners without
waiting on them, so it keeps its lease and starts new jobs meanwhile, even when those runners
are stuck recovering from a replaylog that is gone; and it leaves nothing behind: no
snapshot (a stateless pipeline's too) and no registry row, though the runners beat on until
they hear of it (real Kafka, Postgres, S3, processes)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import psycopg
import pytest
from confluent_kafka.admin import AdminClient
from psycopg import sql

from fennel_dagster import dataset, inputs, meta, pipeline
from fennel_dagster.client import LocalClient
from fennel_dagster.engine import supervisor
from fennel_dagster.engine.snapshots import SnapshotStore
from fennel_dagster.engine.supervisor import Supervisor
from fennel_dagster.metadata.db import connect
from fennel_dagster.metadata.registry import JobRow, branch_jobs, runner_owners
from fennel_dagster.settings import Settings
from fennel_dagster.wire import plan
from tests.engine import repo
from tests.engine.harness import create_topic, produce_raw, wait_for

pytestmark = pytest.mark.services


@pytest.fixture
def raw_topics(engine_settings: Settings) -> Iterator[tuple[str, str]]:
    """Two source topics outside the namespace (no platform asset): one per branch."""
    s = engine_settings
    topics = (f"{s.namespace}-doomed", f"{s.namespace}-kept")
    for t in topics:
        create_topic(s, t)
    yield topics
    admin = AdminClient({"bootstrap.servers": s.kafka_servers})
    for f in admin.delete_topics(list(topics)).values():
        f.result(30)


def _jobs(s: Settings, branch: str) -> list[JobRow]:
    with connect(s, s.pg_schema) as conn:
        return branch_jobs(conn, branch)


class LeaseWatch:
    """Samples the engine's lease every 50 ms: the least of it left, and whether it lapsed."""

    def __init__(self, s: Settings, engine_id: str) -> None:
        self.s, self.engine_id = s, engine_id
        self.least = float("inf")
        self.lapsed_at: list[float] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with connect(self.s, self.s.pg_schema, autocommit=True) as conn:
            while not self.done.wait(0.05):
                row = conn.execute(
                    "SELECT extract(epoch FROM lease_until - now()) FROM engines WHERE id = %s",
                    (self.engine_id,),
                ).fetchone()
                left = float(row[0]) if row else -1.0
                self.least = min(self.least, left)
                if left <= 0:
                    self.lapsed_at.append(time.monotonic())

    def stop(self) -> None:
        self.done.set()
        self.thread.join(10)


def test_a_branch_deleted_mid_recovery_settles_in_seconds(
    engine_settings: Settings, raw_topics: tuple[str, str]
) -> None:
    s = engine_settings
    doomed_raw, kept_raw = raw_topics
    with LocalClient(s) as c:
        c.init_branch("doomed")
        c.commit("doomed", datasets=repo.graph(doomed_raw)[:1], branch="doomed")
    doomed = {j.name: j for j in _jobs(s, "doomed")}
    source = next(j for j in doomed.values() if j.kind == "source")
    # its replaylog deleted by hand: its runners sit in recovery, polling a topic that is gone
    admin = AdminClient({"bootstrap.servers": s.kafka_servers})
    replaylog: Any = source.spec.replaylog
    for f in admin.delete_topics([replaylog]).values():
        f.result(30)
    sup = Supervisor(s, engine_id="engine-td")
    sup.start_lookups()
    serving = threading.Thread(target=sup.serve, daemon=True)
    serving.start()
    watch: LeaseWatch | None = None
    try:
        wait_for(lambda: {k[0] for k in sup.runners} >= {j.hash for j in doomed.values()}, 30,
                 "the doomed branch's runners")  # fmt: skip
        pids = {r.process.pid for r in sup.runners.values()}
        time.sleep(3.0)  # well into their recovery
        watch = LeaseWatch(s, sup.engine_id)
        t0 = time.monotonic()
        with LocalClient(s) as c:
            c.delete_branch("doomed")
            deleted = time.monotonic()
            c.init_branch("kept")
            c.commit("kept", datasets=repo.graph(kept_raw)[:1], branch="kept")
        committed = time.monotonic()
        kept = _jobs(s, "kept")
        assert not {j.hash for j in kept} & {j.hash for j in doomed.values()}
        kept_keys = {(j.hash, p) for j in kept for p in range(j.partitions)}

        def beating() -> bool:
            with connect(s, s.pg_schema) as conn:
                return kept_keys <= set(runner_owners(conn))

        wait_for(beating, 180, "the kept branch's runners to start and beat")
        started_s = time.monotonic() - committed
        wait_for(lambda: not any(_alive(pid) for pid in pids), 180, "the doomed runners to end")
        teardown_s = time.monotonic() - deleted
        watch.stop()
        print(f"teardown {teardown_s:.1f}s; kept branch running {started_s:.1f}s after its "
              f"commit; least lease left {watch.least:.2f}s (delete took {deleted - t0:.1f}s)")  # fmt: skip
        assert not watch.lapsed_at, f"the engine's lease lapsed (least left {watch.least:.2f}s)"
        assert started_s < 15.0, f"the kept branch's runners took {started_s:.1f}s to start"
        assert teardown_s < 20.0, f"the doomed runners took {teardown_s:.1f}s to end"
    finally:
        if watch is not None:
            watch.stop()
        sup.stop()
        serving.join(120)


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False


def stateless_graph(topic: str) -> list[Any]:
    """The engine repo's Txn, and Big: a stateless pipeline (a filter) over it."""
    txn = repo.graph(topic)[0]

    @meta(owner="engine@example.com")
    @dataset
    class Big:
        uid: int
        amount: float
        ts: datetime

        @pipeline
        @inputs(txn)
        def big(cls, t):
            return t.filter(lambda df: df["amount"] > 50)

    return [txn, Big]


def test_a_deleted_branch_leaves_no_snapshot_and_no_registry_row(
    engine_settings: Settings, raw_topics: tuple[str, str]
) -> None:
    s = engine_settings
    raw = raw_topics[0]
    with LocalClient(s) as c:
        c.init_branch("doomed")
        c.commit("doomed", datasets=stateless_graph(raw), branch="doomed")
    doomed = _jobs(s, "doomed")
    big = next(j for j in doomed if j.kind == "pipeline")
    assert isinstance(big.spec, plan.PipelineJobSpec) and not big.spec.stateful
    produce_raw(s, raw, repo.payloads(repo.events(200)))
    store = SnapshotStore(s)
    sup = Supervisor(s, engine_id="engine-gone")
    sup.start_lookups()
    serving = threading.Thread(target=sup.serve, daemon=True)
    serving.start()
    hashes = [j.hash for j in doomed]
    try:
        wait_for(lambda: all(store.keys(big.name, p) for p in range(big.partitions)), 90,
                 "the stateless pipeline's snapshots")  # fmt: skip
        with connect(s, s.pg_schema) as conn:
            assert _rows(conn, hashes)["runner_heartbeats"] > 0
            assert _rows(conn, hashes)["stream_stats"] > 0
        pids = {r.process.pid for r in sup.runners.values()}
        with LocalClient(s) as c:  # runners running: they beat on until they hear of it
            c.delete_branch("doomed")
        wait_for(lambda: not any(_alive(pid) for pid in pids), 60, "the runners to end")
        time.sleep(3.0)  # a beat that was under way lands by now
    finally:
        sup.stop()
        serving.join(120)
    with connect(s, s.pg_schema) as conn:
        assert _rows(conn, hashes) == dict.fromkeys(REGISTRY_TABLES, 0)
    left = store.objects.list(f"{s.namespace}/snapshots/", recursive=True)
    assert not left, f"snapshots outlived their branch: {[o.key for o in left][:5]}"
    with LocalClient(s) as c:  # nor anything else of it (offline tables)
        assert c.physical.stray_objects(set()) == []


REGISTRY_TABLES = ("jobs", "job_partitions", "job_failures", "runner_heartbeats", "stream_stats")


def _rows(conn: psycopg.Connection, hashes: list[str]) -> dict[str, int]:
    out = {}
    for table in REGISTRY_TABLES:
        column = "hash" if table == "jobs" else "job_hash"
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE {} = ANY(%s)").format(
                sql.Identifier(table), sql.Identifier(column)
            ),
            (hashes,),
        ).fetchone()
        out[table] = int(row[0]) if row else 0
    return out


def _deaf_to_sigterm(ready: Any) -> None:
    """A runner that will not stop: SIGTERM ignored, sleeping."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready.set()
    time.sleep(600)


def test_a_runner_that_will_not_stop_is_killed_without_holding_the_poll(
    engine_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervisor, "STOP_GRACE_S", 2.0)
    sup = Supervisor(engine_settings, engine_id="engine-deaf")
    ready = sup._ctx.Event()
    proc = sup._ctx.Process(target=_deaf_to_sigterm, args=(ready,), daemon=True)
    proc.start()
    assert ready.wait(30)
    key = ("deaf-job", 0)
    job = JobRow("deaf-job", "deaf", "source", 1, None)  # type: ignore[arg-type]
    sup.runners[key] = supervisor._Running(job, 0, proc, time.monotonic(), group=(key,))
    try:
        t0 = time.monotonic()
        sup._stop_runner((key,))
        assert time.monotonic() - t0 < 0.5, "stopping a runner waited on it"
        assert proc.is_alive() and sup.winding_down() == {key}
        time.sleep(1.0)
        assert proc.is_alive(), "SIGTERM is all it gets within its grace"
        wait_for(lambda: not sup.winding_down(), 10, "the reaper to kill and join it")
        assert time.monotonic() - t0 >= 2.0
        assert proc.exitcode == -signal.SIGKILL
    finally:
        if proc.is_alive():
            proc.kill()
        sup.shutdown()
