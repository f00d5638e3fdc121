"""Offline writers share a runner process (``engine.sharing``) and stay exactly once.

An engine runs the engine repo (Txn's source, Spend's pipeline, and the two datasets'
offline writers): the writers run in one process, the source and pipeline partitions in one
each. That shared process is SIGKILLed while events flow; the supervisor starts the group
again, and each offline table ends equal to its topic: every offset once (real Kafka, S3,
Postgres).
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import pytest

from fennel_dagster.engine.supervisor import Supervisor
from fennel_dagster.offline.table import OfflineTable
from fennel_dagster.settings import Settings
from fennel_dagster.wire import plan
from tests.engine import repo
from tests.engine.harness import (
    commit,
    create_topic,
    produce_raw,
    read_topic,
    table_rows,
    wait_for,
)

pytestmark = pytest.mark.services


def test_writers_share_a_process_and_a_killed_one_leaves_each_table_exactly_once(
    engine_settings: Settings,
) -> None:
    s = engine_settings.with_(offline_flush_s=0.3, partitions=2)
    raw = f"{s.namespace}.raw"
    create_topic(s, raw, partitions=2)
    jobs = commit(s, repo.graph(raw))
    writers = {name: j for name, j in jobs.items() if j.kind == "offline"}
    assert set(writers) == {"offline:Txn", "offline:Spend"}, sorted(jobs)
    tables = {}
    for name, j in writers.items():
        assert isinstance(j.spec, plan.OfflineJobSpec)
        tables[name] = (OfflineTable(s, j.spec.table), j.spec.input_topic)
    ev = repo.events(6000, keys=20, seed=11)
    stop = threading.Event()

    def trickle() -> None:  # events keep arriving, so the writers are always about to commit
        for i in range(0, len(ev), 100):
            produce_raw(s, raw, repo.payloads(ev.iloc[i : i + 100]), partitions=2)
            if stop.wait(0.2):
                return

    sup = Supervisor(s, engine_id="shared-writers")
    sup.start_lookups()
    serving = threading.Thread(target=sup.serve, daemon=True)
    serving.start()
    producer = threading.Thread(target=trickle, daemon=True)
    kills = 0
    try:
        wanted = sum(j.partitions for j in jobs.values())
        wait_for(lambda: len(sup.runners) == wanted, 60, "every partition started")
        pids = {k: r.process.pid for k, r in sup.runners.items()}
        writer_pids = {pids[(j.hash, 0)] for j in writers.values()}
        assert len(writer_pids) == 1, pids  # the two writers: one process
        others = [pid for k, pid in pids.items() if pid not in writer_pids]
        chained = sum(len(r.chained) for k, r in sup.runners.items() if r.chained and k[0] ==
                      r.chained[0][0][0])  # fmt: skip
        assert len(others) == wanted - 2, pids
        assert len(set(others)) == len(others) - chained, pids  # the rest: one each, a chain one
        producer.start()
        txn_table = tables["offline:Txn"][0]
        for _ in range(4):
            before = txn_table.version()
            wait_for(lambda b=before: txn_table.version() != b, 60, "a commit")  # type: ignore[misc]
            time.sleep(random.uniform(0.0, 0.4))
            shared = sup.runners[(writers["offline:Txn"].hash, 0)].process
            os.kill(shared.pid, signal.SIGKILL)  # type: ignore[arg-type]
            kills += 1
            wait_for(
                lambda p=shared: sup.runners[(writers["offline:Txn"].hash, 0)].process is not p,
                60,
                "the group restarted",
            )  # type: ignore[misc]
        producer.join(120)
        wait_for(lambda: len(table_rows(txn_table)) >= len(ev), 120, "every event in Txn's table")
        for name, (table, topic) in tables.items():  # the topics stop growing; tables follow

            def caught_up(t: OfflineTable = table, topic: str = topic) -> bool:
                return table_rows(t) == sorted((p, o) for p, o, _ in read_topic(s, topic, 2))

            wait_for(caught_up, 120, f"{name} to equal its topic")
            want = sorted((p, o) for p, o, _ in read_topic(s, topic, 2))
            assert table_rows(table) == want, name  # every offset once: nothing lost or twice
        # the restarted group is still one process for both writers
        assert len({sup.runners[(j.hash, 0)].process.pid for j in writers.values()}) == 1
    finally:
        stop.set()
        sup.stop()
        serving.join(60)
    assert kills == 4
    txn_rows = tables["offline:Txn"][0].read(["uid"]).to_pandas()
    assert sorted(txn_rows.uid) == sorted(ev.uid)  # every event, once
