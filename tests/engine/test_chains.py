"""A source and its pipeline fused in one thread and one transaction a batch (``engine.chain``)
stay exactly once (real Kafka, S3, Postgres).

The engine repo's Txn is a keyless dataset with one Kafka source, and Spend's pipeline
streams it: each partition of the two runs as a chain. Here Spend is committed after Txn
has taken half the events, so each chain's pipeline starts behind the topic: it reads it
from Kafka while the source writes on, then takes the source's rows in memory. Chains are
SIGKILLed throughout. Every raw event must reach Txn's topic once, Spend's outputs must equal
the mock client's over all the events, its state must answer what the mock answers, and
the rows must have been handed over in memory (the engine's metrics count them).
"""

from __future__ import annotations

import os
import random
import re
import signal
import threading

import pandas as pd
import pytest

from fennel_dagster.engine import metrics
from fennel_dagster.ops.rows import to_records
from fennel_dagster.settings import Settings
from tests.engine import repo
from tests.engine.expected import as_multiset, mock_rows, mock_run
from tests.engine.harness import commit, create_topic, read_topic, wait_for
from tests.engine.test_exactly_once import COLS, check_state, in_order_events
from tests.engine.test_shared_streams import engine, produce_by_uid

pytestmark = pytest.mark.services


def _handed(sup_metrics: bytes, job: str) -> float:
    """How many messages the chains handed ``job``'s partitions in memory."""
    pattern = (
        rf'fennel_engine_handed_messages_total\{{job="{re.escape(job)}",partition="\d+"\}} (\S+)'
    )
    return sum(float(v) for v in re.findall(pattern, sup_metrics.decode()))


def test_a_pipeline_added_over_history_catches_up_in_its_chain_exactly_once(
    engine_settings: Settings,
) -> None:
    s = engine_settings
    raw = f"{s.namespace}.raw"
    create_topic(s, raw)
    datasets = repo.graph(raw)
    total = 2400
    ev = in_order_events(total)
    source = commit(s, datasets[:1])["source:Txn"]
    txn = source.spec.output_topic
    with engine(s, "chains-before"):  # Txn alone: half of the events, in many transactions
        waves = 30  # more messages a partition than a chain waits for (CATCH_UP_MESSAGES)
        first = ev.iloc[: total // 2]
        for w in range(waves):
            produce_by_uid(
                s, raw, first.iloc[w * len(first) // waves : (w + 1) * len(first) // waves]
            )
            n = (w + 1) * len(first) // waves
            wait_for(lambda n=n: len(read_topic(s, txn, 4, timeout=5)) >= n, 120, "Txn's rows")
    pipe = commit(s, datasets)["pipeline:Spend"]
    rnd = random.Random(3)
    kills = 0
    with engine(s, "chains") as sup:
        for p in range(4):  # each partition of the two: one chain, in one process
            run = sup.runners[(source.hash, p)]
            assert run.chained == (((source.hash, p), (pipe.hash, p)),), run.chained
            assert sup.runners[(pipe.hash, p)].process is run.process
        waves = 4
        rest = ev.iloc[total // 2 :]
        for w in range(waves):
            produce_by_uid(s, raw, rest.iloc[w * len(rest) // waves : (w + 1) * len(rest) // waves])
            threading.Event().wait(rnd.uniform(0.5, 1.5))
            victim = sup.runners[(pipe.hash, rnd.randrange(4))].process
            if victim.is_alive() and victim.pid:
                os.kill(victim.pid, signal.SIGKILL)
                kills += 1
        out = pipe.spec.output_topic
        wait_for(lambda: len(read_topic(s, out, 4, timeout=5)) >= total, 240, "all outputs")
        for p in range(4):  # restarted as chains again
            assert sup.runners[(pipe.hash, p)].process is sup.runners[(source.hash, p)].process
        produce_by_uid(s, raw, in_order_events(40, start=total))  # the chains, caught up
        wait_for(lambda: len(read_topic(s, out, 4, timeout=5)) >= total + 40, 120, "the rest")
        wait_for(lambda: _handed(metrics.collect(sup.metrics_dir), pipe.name) > 0, 60,
                 "rows handed over in memory")  # fmt: skip
    assert kills >= 3, kills
    rows = [r for _, _, r in read_topic(s, txn, 4)]
    every = pd.concat([ev, in_order_events(40, start=total)], ignore_index=True)
    assert sorted((r["uid"], r["amount"], r["ts"]) for r in rows) == sorted(
        (r["uid"], r["amount"], r["ts"]) for r in to_records(every)
    )  # every raw event in Txn's topic once
    mock = mock_run(datasets, every)
    got = [r for _, _, r in read_topic(s, pipe.spec.output_topic, 4)]
    assert len(got) == len(every), f"{len(got)} outputs for {len(every)} events"
    assert as_multiset(got, COLS) == as_multiset(mock_rows(mock, "Spend"), COLS)
    check_state(s, "chains", pipe, mock, repo.T0 + pd.Timedelta(hours=9))


def test_chains_off_runs_each_partition_alone(engine_settings: Settings) -> None:
    s = engine_settings.with_(engine_fuse_sources=False)
    raw = f"{s.namespace}.raw"
    create_topic(s, raw)
    jobs = commit(s, repo.graph(raw))
    pipe = jobs["pipeline:Spend"]
    ev = in_order_events(200)
    with engine(s, "unchained") as sup:
        assert not any(r.chained for r in sup.runners.values())
        produce_by_uid(s, raw, ev)
        out = pipe.spec.output_topic
        wait_for(lambda: len(read_topic(s, out, 4, timeout=5)) >= len(ev), 120, "all outputs")
        assert _handed(metrics.collect(sup.metrics_dir), pipe.name) == 0
