"""A deleted dataset stays deleted: nothing of it is left in the bucket, Kafka or the state
dir's reach, and committing it again starts it clean — real Kafka, Postgres, S3, RocksDB.

Spend (a keyed Count+Sum) runs and snapshots; it is deleted (two commits: marked deleted,
then dropped) and committed again, identically, so its jobs get the same names. The
re-created Spend must compute exactly what the MockClient computes from Txn's rows — not
that plus the deleted incarnation's state — also after a SIGKILL of the engine and a cold
restart.
"""

from __future__ import annotations

import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from confluent_kafka.admin import AdminClient

from fennel_dagster.client import LocalClient
from fennel_dagster.engine.snapshots import SnapshotStore
from fennel_dagster.ops.rows import to_records
from fennel_dagster.settings import Settings
from tests.commit_protocol.invariants import assert_invariants
from tests.engine import repo
from tests.engine.expected import as_multiset, mock_rows, mock_run
from tests.engine.harness import (
    Fleet,
    commit,
    create_topic,
    engine_process,
    produce_rows,
    read_topic,
    wait_for,
)  # fmt: skip
from tests.engine.test_exactly_once import COLS, check_state, in_order_events

pytestmark = pytest.mark.services


@pytest.fixture
def raw_topic(engine_settings: Settings) -> Iterator[str]:
    """Txn's source topic, created as in production (its source runners then start at once).
    Outside the namespace: no platform asset, so no stray for the invariants."""
    topic = f"{engine_settings.namespace}-raw"
    create_topic(engine_settings, topic)
    yield topic
    admin = AdminClient({"bootstrap.servers": engine_settings.kafka_servers})
    for f in admin.delete_topics([topic]).values():
        f.result(30)


def test_a_deleted_dataset_leaves_nothing_and_comes_back_clean(
    engine_settings: Settings, raw_topic: str, tmp_path: Path
) -> None:
    s = engine_settings
    raw = raw_topic
    datasets = repo.graph(raw)
    jobs = commit(s, datasets)
    pipe = jobs["pipeline:Spend"]
    txn_topic = pipe.spec.inputs[0].topic
    first = in_order_events(600)
    produce_rows(s, txn_topic, to_records(first), by="uid")
    fleet = Fleet(s, owner="a")
    fleet.start(pipe)
    wait_for(lambda: len(read_topic(s, pipe.spec.output_topic, 4, timeout=5)) >= 600, 90, "wave 1")
    fleet.stop()  # graceful: each partition leaves a snapshot
    store = SnapshotStore(s)
    assert all(store.keys(pipe.name, p) for p in range(4)), "no snapshots to leave behind"
    assert (s.state_path / "a" / pipe.name).is_dir()

    with LocalClient(s) as c:  # the two-commit delete
        c.commit("mark Spend deleted", datasets=repo.graph(raw, spend_deleted=True))
        c.commit("drop Spend", datasets=datasets[:1])
        # no object outside a live prefix; the fleet (no supervisor, which would drop it) keeps
        # the deleted incarnation's local state, to meet it again below
        assert_invariants(c, state_dir=False)
    assert not any(store.keys(pipe.name, p) for p in range(4)), "snapshots outlived the delete"

    again = commit(s, repo.graph(raw))  # identical: the same job names
    pipe2 = again["pipeline:Spend"]
    assert pipe2.name == pipe.name
    second = in_order_events(300, 600)
    produce_rows(s, txn_topic, to_records(second), by="uid")
    fleet = Fleet(s, owner="a")  # same owner: the deleted incarnation's RocksDB is right there
    fleet.start(pipe2)
    out = pipe2.spec.output_topic
    wait_for(lambda: len(read_topic(s, out, 4, timeout=5)) >= 900, 120, "the re-created Spend")
    fleet.stop()
    both = pd.concat([first, second], ignore_index=True)
    mock = mock_run(datasets, both)
    got = [r for _, _, r in read_topic(s, out, 4)]
    assert as_multiset(got, COLS) == as_multiset(mock_rows(mock, "Spend"), COLS)
    check_state(s, "a", pipe2, mock, repo.T0 + pd.Timedelta(hours=4))

    # the whole engine SIGKILLed mid-stream, its local state lost: the cold restart restores
    # this incarnation's snapshot (the deleted one's are gone) and counts on, exactly once
    third = in_order_events(400, 900)
    log = str(tmp_path / "engine.log")
    engine = engine_process(s, "a", log)
    try:
        produce_rows(s, txn_topic, to_records(third.iloc[:200]), by="uid")
        wait_for(lambda: len(read_topic(s, out, 4, timeout=5)) >= 1000, 180, "the engine")
        produce_rows(s, txn_topic, to_records(third.iloc[200:]), by="uid")
        engine.send_signal(signal.SIGKILL)  # runners die with it (parent-death signal)
        engine.wait(30)
        shutil.rmtree(s.state_path / "a")
        engine = engine_process(s, "a", log)
        wait_for(lambda: len(read_topic(s, out, 4, timeout=5)) >= 1300, 180, "after the restart")
    finally:
        engine.terminate()
        engine.wait(60)
    mock = mock_run(datasets, pd.concat([both, third], ignore_index=True))
    got = [r for _, _, r in read_topic(s, out, 4)]
    assert as_multiset(got, COLS) == as_multiset(mock_rows(mock, "Spend"), COLS)
    assert "restored" in open(log).read(), "the cold restart did not restore a snapshot"
