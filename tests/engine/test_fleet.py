"""Supervisors: rendezvous ownership, rebalance to a new engine, lookups through the LocalClient."""

from __future__ import annotations

import threading
import time

import pandas as pd
import pytest

from fennel_dagster.client import LocalClient
from fennel_dagster.engine.supervisor import Supervisor
from fennel_dagster.metadata.registry import rendezvous_owner
from fennel_dagster.ops.rows import to_records
from fennel_dagster.settings import Settings
from tests.engine import repo
from tests.engine.expected import as_multiset, mock_rows, mock_run
from tests.engine.harness import commit, create_topic, produce_rows, read_topic, wait_for
from tests.engine.test_exactly_once import COLS, KEYS, in_order_events

pytestmark = pytest.mark.services


def test_rendezvous_moves_only_the_partitions_the_new_engine_wins() -> None:
    before = {(j, p): rendezvous_owner(j, p, ["a", "b"]) for j in "xyz" for p in range(16)}
    after = {(j, p): rendezvous_owner(j, p, ["a", "b", "c"]) for j in "xyz" for p in range(16)}
    moved = [k for k in before if before[k] != after[k]]
    assert moved and all(after[k] == "c" for k in moved)
    assert {rendezvous_owner("x", p, ["a", "b"]) for p in range(16)} == {"a", "b"}


def start(s: Settings, engine_id: str) -> tuple[Supervisor, threading.Thread]:
    sup = Supervisor(s, engine_id=engine_id)
    sup.start_lookups()
    t = threading.Thread(target=sup.serve, daemon=True)
    t.start()
    return sup, t


def test_a_second_engine_takes_over_and_exactly_once_holds_through_the_rebalance(
    engine_settings: Settings,
) -> None:
    s = engine_settings
    datasets = repo.graph(f"{s.namespace}.raw")
    create_topic(s, f"{s.namespace}.raw")
    jobs = commit(s, datasets)
    pipe = jobs["pipeline:Spend"]
    out_topic = pipe.spec.output_topic
    ev = in_order_events(1500)
    a, ta = start(s, "engine-a")
    b = tb = None
    try:
        produce_rows(s, pipe.spec.inputs[0].topic, to_records(ev.iloc[:500]), by="uid")
        wait_for(lambda: len(read_topic(s, out_topic, 4, timeout=5)) >= 500, 90, "wave 1")
        b, tb = start(s, "engine-b")
        wait_for(lambda: len(b.runners) > 0, 30, "engine b to own partitions")
        assert len(a.runners) > 0, "both engines should share the partitions"
        produce_rows(s, pipe.spec.inputs[0].topic, to_records(ev.iloc[500:1000]), by="uid")
        a.stop()  # the first engine leaves: b takes everything
        ta.join(120)
        wanted = sum(j.partitions for j in jobs.values())
        wait_for(lambda: len(b.runners) == wanted, 30, "engine b to own every partition")
        produce_rows(s, pipe.spec.inputs[0].topic, to_records(ev.iloc[1000:]), by="uid")
        wait_for(lambda: len(read_topic(s, out_topic, 4, timeout=5)) >= 1500, 120, "all outputs")
        mock = mock_run(datasets, ev)
        got = [r for _, _, r in read_topic(s, out_topic, 4)]
        assert len(got) == 1500
        assert as_multiset(got, COLS) == as_multiset(mock_rows(mock, "Spend"), COLS)

        at = pd.Series([repo.T0 + pd.Timedelta(hours=5)] * len(KEYS))
        want, want_found = mock.lookup("Spend", KEYS, at)
        deadline = time.monotonic() + 30
        with LocalClient(s) as client:
            while True:
                try:
                    got_df, found = client.lookup("Spend", KEYS, timestamps=at)
                    break
                except LookupError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        assert found.tolist() == want_found.tolist()
        assert to_records(got_df[["uid", "total", "n"]]) == to_records(want[["uid", "total", "n"]])
    finally:
        a.stop()
        if b is not None:
            b.stop()
            tb.join(120)  # type: ignore[union-attr]
