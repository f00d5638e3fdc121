"""Exactly-once under crashes, cold recovery from S3, and fencing — real Kafka, RocksDB, S3.

The crash test's stream carries poison rows too (not JSON; a key beyond int64): each must
be an error row exactly once while runners are killed around them.

Rows of one key go to one input partition in event-time order, so a clean run's outputs are
deterministic and equal the mock client's; any lost or duplicated batch shows up as a
difference in the committed output multiset or in the final state.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
import time

import pandas as pd
import pytest

from fennel_dagster.engine.error_records import decode_error
from fennel_dagster.engine.hangar import Hangar
from fennel_dagster.engine.lookups import answer, partitions_of
from fennel_dagster.engine.runner import Fenced, Runner, state_path
from fennel_dagster.engine.snapshots import SnapshotStore
from fennel_dagster.engine.supervisor import Supervisor
from fennel_dagster.ops.rows import to_records
from fennel_dagster.settings import Settings
from tests.engine import repo
from tests.engine.chaos import kill_all, kill_at_random
from tests.engine.expected import as_multiset, mock_rows, mock_run
from tests.engine.harness import (
    Fleet,
    commit,
    create_topic,
    produce_raw,
    produce_rows,
    raw_records,
    read_topic,
    wait_for,
)

pytestmark = pytest.mark.services
COLS = ["uid", "total", "n", "ts"]
KEYS = pd.DataFrame({"uid": list(range(20))})


def in_order_events(n: int, start: int = 0) -> pd.DataFrame:
    ev = repo.events(n + start, keys=20, seed=11).iloc[start:].reset_index(drop=True)
    ev["ts"] = [repo.T0 + pd.Timedelta(seconds=10 * (start + i)) for i in range(len(ev))]
    return ev


def check_state(s: Settings, owner: str, job, mock, at: pd.Timestamp) -> None:  # type: ignore[no-untyped-def]
    ts = pd.Series([at] * len(KEYS))
    want, _ = mock.lookup("Spend", KEYS, ts)
    parts = partitions_of(job, KEYS)
    got = []
    for i, part in enumerate(parts):
        with Hangar(state_path(s, owner, job.name, part)) as h:
            got.append(answer(h, job, KEYS.iloc[[i]], ts.iloc[[i]])[0])
    got_df = pd.concat(got, ignore_index=True)
    assert to_records(got_df[["uid", "total", "n"]]) == to_records(want[["uid", "total", "n"]])


def test_sigkill_runners_50_times_while_events_flow_and_outputs_stay_exactly_once(
    engine_settings: Settings,
) -> None:
    s = engine_settings
    datasets = repo.graph(f"{s.namespace}.raw")
    create_topic(s, f"{s.namespace}.raw")
    jobs = commit(s, datasets)
    pipe = jobs["pipeline:Spend"]
    total = 3000
    ev = in_order_events(total)
    os.environ["FENNEL_ENGINE_CRASH"] = "mid_batch:0.03,after_commit:0.03,during_snapshot:0.3"
    sup = Supervisor(s, engine_id="crashy")
    t = threading.Thread(target=sup.serve, daemon=True)
    t.start()
    kills = 0
    rnd = random.Random(23)
    try:
        waves = 6
        for w in range(waves):
            chunk = ev.iloc[w * total // waves : (w + 1) * total // waves]
            produce_rows(s, pipe.spec.inputs[0].topic, to_records(chunk), by="uid")
            poison = [b"not json %d" % w, json.dumps({"uid": 2**70 + w, "amount": 1.0,
                      "ts": repo.T0.isoformat()}).encode()]  # fmt: skip
            produce_raw(s, pipe.spec.inputs[0].topic, poison, partitions=4)
            kills += kill_at_random(sup, 3.5, rnd, pause=(0.1, 0.4))  # ~14 attempts a wave
        os.environ.pop("FENNEL_ENGINE_CRASH")
        kills += kill_all(sup)  # restart every runner without crash points
        out_topic = pipe.spec.output_topic
        wait_for(lambda: len(read_topic(s, out_topic, 4, timeout=5)) >= total, 240, "all outputs")
        time.sleep(3)  # let the index runners catch up on the last outputs
    finally:
        os.environ.pop("FENNEL_ENGINE_CRASH", None)
        sup.stop()
        t.join(120)
    assert kills >= 50, f"only {kills} kills"
    mock = mock_run(datasets, ev)
    got = [r for _, _, r in read_topic(s, out_topic, 4)]
    assert len(got) == total, f"{len(got)} outputs for {total} events"
    assert as_multiset(got, COLS) == as_multiset(mock_rows(mock, "Spend"), COLS)
    # poison rows in the stream: each an error row exactly once, crashes or not
    stages = sorted(decode_error(v)["stage"] for v in raw_records(s, pipe.spec.error_topic))
    assert stages == ["decode"] * waves + ["process"] * waves, stages
    for at in (repo.T0 + pd.Timedelta(hours=3), repo.T0 + pd.Timedelta(hours=9)):
        check_state(s, "crashy", pipe, mock, at)
    # Spend ends in a continuous aggregate: its pipeline job's state serves lookups (no index)
    assert "index:Spend" not in jobs
    ts = pd.Series([repo.T0 + pd.Timedelta(hours=9)] * len(KEYS))
    for i, part in enumerate(partitions_of(pipe, KEYS)):
        with Hangar(state_path(s, "crashy", pipe.name, part)) as h:
            df, found = answer(h, pipe, KEYS.iloc[[i]], ts.iloc[[i]])
        assert bool(found.iloc[0])


def test_cold_recovery_restores_the_s3_snapshot_and_replays_only_what_came_after(
    engine_settings: Settings,
) -> None:
    s = engine_settings
    datasets = repo.graph(f"{s.namespace}.raw")
    jobs = commit(s, datasets)
    pipe = jobs["pipeline:Spend"]
    out_topic = pipe.spec.output_topic
    first, middle, last = in_order_events(600), in_order_events(300, 600), in_order_events(200, 900)
    produce_rows(s, pipe.spec.inputs[0].topic, to_records(first), by="uid")
    fleet = Fleet(s.with_(engine_snapshot_interval_s=3600.0), owner="a")
    fleet.start(pipe)
    wait_for(lambda: len(read_topic(s, out_topic, 4, timeout=5)) >= 600, 90, "first outputs")
    for _, _, r in fleet.threads:
        r.request_snapshot()
    for _, _, r in fleet.threads:
        assert r.snapshot_done.wait(30), "snapshot not taken"
        r.snapshot_on_stop = False  # the crash below loses everything after this snapshot
    produce_rows(s, pipe.spec.inputs[0].topic, to_records(middle), by="uid")
    wait_for(lambda: len(read_topic(s, out_topic, 4, timeout=5)) >= 900, 90, "middle outputs")
    runners = fleet.stop()
    assert all(SnapshotStore(s).keys(pipe.name, p) for p in range(4)), "no snapshot uploaded"
    processed = sum(r.stats.messages for r in runners)
    shutil.rmtree(s.state_path / "a")  # local state lost

    produce_rows(s, pipe.spec.inputs[0].topic, to_records(last), by="uid")
    fleet = Fleet(s, owner="a")
    fleet.start(pipe)
    wait_for(lambda: len(read_topic(s, out_topic, 4, timeout=5)) >= 1100, 90, "all outputs")
    runners = fleet.stop()
    assert all(r.stats.restored_snapshot for r in runners)
    replayed = sum(r.stats.replayed_messages for r in runners)
    # only the middle wave (stage 1 + stage 2: at most 2 x 300 messages) is replayed
    assert 0 < replayed <= 600 < processed, (replayed, processed)
    mock = mock_run(datasets, pd.concat([first, middle, last], ignore_index=True))
    got = [r for _, _, r in read_topic(s, out_topic, 4)]
    assert as_multiset(got, COLS) == as_multiset(mock_rows(mock, "Spend"), COLS)
    check_state(s, "a", pipe, mock, repo.T0 + pd.Timedelta(hours=4))


def test_a_second_runner_for_a_partition_fences_the_first_and_outputs_stay_exactly_once(
    engine_settings: Settings,
) -> None:
    s = engine_settings
    datasets = repo.graph(f"{s.namespace}.raw")
    jobs = commit(s, datasets)
    pipe = jobs["pipeline:Spend"]
    out_topic = pipe.spec.output_topic
    ev = in_order_events(1200)
    produce_rows(s, pipe.spec.inputs[0].topic, to_records(ev.iloc[:600]), by="uid")
    old, new = Fleet(s, owner="old"), Fleet(s, owner="new")
    old.start(pipe)
    wait_for(lambda: len(read_topic(s, out_topic, 4, timeout=5)) >= 600, 90, "first outputs")
    new.start(pipe)  # same transactional ids: the old runners are fenced
    produce_rows(s, pipe.spec.inputs[0].topic, to_records(ev.iloc[600:]), by="uid")
    wait_for(lambda: len(read_topic(s, out_topic, 4, timeout=5)) >= 1200, 90, "all outputs")
    wait_for(lambda: len(old.failures) == 4, 30, "the old runners to notice they are fenced")
    assert all(isinstance(f, Fenced) for f in old.failures), [
        type(f).__name__ + ": " + str(f)[:150] for f in old.failures if not isinstance(f, Fenced)
    ]
    old.stop(allow=(Fenced,))
    new.stop()
    mock = mock_run(datasets, ev)
    got = [r for _, _, r in read_topic(s, out_topic, 4)]
    assert len(got) == 1200
    assert as_multiset(got, COLS) == as_multiset(mock_rows(mock, "Spend"), COLS)
    check_state(s, "new", pipe, mock, repo.T0 + pd.Timedelta(hours=4))


_ = Runner  # the runner class the fleets drive
