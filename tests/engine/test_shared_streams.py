"""Stream partitions sharing a runner process (``engine_streams_per_process``) stay exactly
once (real Kafka, S3, Postgres).

An engine runs the engine repo with two stream partitions a process: each process holds one
partition of Txn's source and the same partition of Spend's pipeline, never two partitions of
one job. Shared processes are SIGKILLed while raw events flow into the source; every event
must reach Txn's topic once, Spend's outputs must equal the mock client's, and Spend's state
must answer what the mock answers.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pandas as pd
import pytest
from confluent_kafka import Producer

from fennel_dagster.client import LocalClient
from fennel_dagster.engine.supervisor import Supervisor
from fennel_dagster.metadata.db import connect
from fennel_dagster.metadata.registry import JobRow, list_jobs
from fennel_dagster.ops.rows import to_records
from fennel_dagster.settings import Settings
from tests.engine import repo
from tests.engine.chaos import kill_all
from tests.engine.expected import as_multiset, mock_rows, mock_run
from tests.engine.harness import commit, create_topic, read_topic, wait_for
from tests.engine.test_exactly_once import COLS, check_state, in_order_events

pytestmark = pytest.mark.services


def produce_by_uid(s: Settings, topic: str, ev: pd.DataFrame) -> None:
    """Raw events, a uid's in one partition in event-time order (so outputs are the mock's)."""
    p = Producer({"bootstrap.servers": s.kafka_servers, "enable.idempotence": True})
    for r in ev.itertuples():
        value = {"uid": int(r.uid), "amount": float(r.amount), "ts": r.ts.isoformat()}
        p.produce(topic, json.dumps(value).encode(), partition=int(r.uid) % 4)
    assert p.flush(30) == 0


def two_a_process(engine_settings: Settings) -> tuple[Settings, str, list[Any], JobRow, JobRow]:
    """The engine repo committed, its raw topic made, two stream partitions a process."""
    s = engine_settings.with_(engine_streams_per_process=2)
    raw = f"{s.namespace}.raw"
    create_topic(s, raw)
    datasets = repo.graph(raw)
    jobs = commit(s, datasets)
    return s, raw, datasets, jobs["source:Txn"], jobs["pipeline:Spend"]


@contextmanager
def engine(s: Settings, engine_id: str) -> Iterator[Supervisor]:
    """A supervisor serving in a thread, its every partition started."""
    sup = Supervisor(s, engine_id=engine_id)
    sup.start_lookups()
    serving = threading.Thread(target=sup.serve, daemon=True)
    serving.start()
    try:
        with connect(s, s.pg_schema) as conn:
            wanted = sum(j.partitions for j in list_jobs(conn))
        wait_for(lambda: len(sup.runners) == wanted, 60, "every partition started")
        yield sup
    finally:
        sup.stop()
        serving.join(120)


def test_stream_partitions_share_a_process_by_slice_and_stay_exactly_once_when_killed(
    engine_settings: Settings,
) -> None:
    s, raw, datasets, source, pipe = two_a_process(engine_settings)
    assert source.partitions == pipe.partitions == 4
    total = 2400
    ev = in_order_events(total)
    rnd = random.Random(5)
    kills = 0
    with engine(s, "shared-streams") as sup:
        for p in range(4):  # partition p of the source and of the pipeline: one process
            shared = sup.runners[(source.hash, p)].process
            assert sup.runners[(pipe.hash, p)].process is shared, p
        procs = {id(sup.runners[(j.hash, p)].process) for j in (source, pipe) for p in range(4)}
        assert len(procs) == 4
        waves = 6
        for w in range(waves):
            produce_by_uid(s, raw, ev.iloc[w * total // waves : (w + 1) * total // waves])
            for _ in range(2):
                threading.Event().wait(rnd.uniform(0.3, 1.2))
                victim = sup.runners[(pipe.hash, rnd.randrange(4))].process
                if victim.is_alive() and victim.pid:
                    os.kill(victim.pid, signal.SIGKILL)
                    kills += 1
        kills += kill_all(sup)
        out_topic = pipe.spec.output_topic
        wait_for(lambda: len(read_topic(s, out_topic, 4, timeout=5)) >= total, 240, "all outputs")
        # the restarted groups are the same slices again
        for p in range(4):
            assert sup.runners[(pipe.hash, p)].process is sup.runners[(source.hash, p)].process
    assert kills >= 12, kills
    txn_rows = [r for _, _, r in read_topic(s, source.spec.output_topic, 4)]
    assert sorted((r["uid"], r["amount"], r["ts"]) for r in txn_rows) == sorted(
        (r["uid"], r["amount"], r["ts"]) for r in to_records(ev)
    )  # every raw event in Txn's topic once
    mock = mock_run(datasets, ev)
    got = [r for _, _, r in read_topic(s, out_topic, 4)]
    assert len(got) == total, f"{len(got)} outputs for {total} events"
    assert as_multiset(got, COLS) == as_multiset(mock_rows(mock, "Spend"), COLS)
    check_state(s, "shared-streams", pipe, mock, repo.T0 + pd.Timedelta(hours=9))


def test_a_job_removed_from_shared_processes_leaves_the_others_running(
    engine_settings: Settings,
) -> None:
    """Spend is deleted while each of its partitions shares a process with Txn's source: the
    source partitions run on in the same processes (no restart) and every raw event still
    reaches Txn's topic once."""
    s, raw, datasets, source, pipe = two_a_process(engine_settings)
    ev = in_order_events(800)
    with engine(s, "shared-leave") as sup:
        before = {p: sup.runners[(source.hash, p)].process for p in range(4)}
        assert all(sup.runners[(pipe.hash, p)].process is before[p] for p in range(4))
        produce_by_uid(s, raw, ev.iloc[:400])
        out = pipe.spec.output_topic
        wait_for(lambda: len(read_topic(s, out, 4, timeout=5)) >= 400, 120, "Spend's outputs")
        with LocalClient(s) as c:  # the two-commit delete
            c.commit("mark Spend deleted", datasets=repo.graph(raw, spend_deleted=True))
            c.commit("drop Spend", datasets=datasets[:1])
        wait_for(lambda: not any(k[0] == pipe.hash for k in list(sup.runners)), 60,
                 "Spend's partitions to leave")  # fmt: skip
        produce_by_uid(s, raw, ev.iloc[400:])
        txn = source.spec.output_topic
        wait_for(lambda: len(read_topic(s, txn, 4, timeout=5)) >= len(ev), 120, "every event")
        for p in range(4):  # the same processes, each now running its source partition alone
            run = sup.runners[(source.hash, p)]
            assert run.process is before[p] and run.process.is_alive(), p
            assert run.group == ((source.hash, p),)
    rows = [r for _, _, r in read_topic(s, txn, 4)]
    assert sorted((r["uid"], r["amount"], r["ts"]) for r in rows) == sorted(
        (r["uid"], r["amount"], r["ts"]) for r in to_records(ev)
    )  # every raw event once
