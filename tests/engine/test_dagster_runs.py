"""Dagster runs the engine: one run per job partition, relaunched when its process dies.

Against `dagster dev` (webserver + daemon) on the Postgres-backed instance and the real
Kafka: SIGKILL a run's process, the keep-alive sensor marks it failed and relaunches it,
and the committed outputs stay exactly once; removing a dataset stops its runs.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from fennel_dagster.client import LocalClient
from fennel_dagster.metadata import registry
from fennel_dagster.metadata.db import connect
from fennel_dagster.ops.rows import to_records
from fennel_dagster.settings import Settings
from tests.engine import repo
from tests.engine.expected import mock_run
from tests.engine.harness import commit, create_topic, produce_rows, read_topic, wait_for
from tests.engine.test_exactly_once import in_order_events
from tests.platform import REPO, dagster_dev

pytestmark = pytest.mark.services


@pytest.fixture
def dagster_engine(engine_settings: Settings, tmp_path: Path) -> Iterator[Settings]:
    s = engine_settings.with_(
        partitions=1,
        dagster_home=tmp_path / "dagster",
        dagster_port=engine_settings.dagster_port + 393,
    )
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text(
        "load_from:\n  - python_module:\n      module_name: tests.engine.dagster_defs\n"
        f"      working_directory: {REPO}\n"
    )
    with dagster_dev(s, tmp_path / "dagster.log", workspace):
        yield s


def beats(s: Settings) -> dict[tuple[str, int], tuple[str, float]]:
    with connect(s, s.pg_schema) as conn:
        return registry.runner_owners(conn)


def pid_of(s: Settings, job_hash: str) -> int:
    with connect(s, s.pg_schema) as conn:
        row = conn.execute(
            "SELECT pid FROM runner_heartbeats WHERE job_hash = %s AND partition = 0", (job_hash,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_engine_sensor_keeps_one_run_per_partition_and_relaunches_a_killed_one(
    dagster_engine: Settings,
) -> None:
    s = dagster_engine
    create_topic(s, f"{s.namespace}.raw", 1)
    datasets = repo.graph(f"{s.namespace}.raw")
    jobs = commit(s, datasets)
    pipe = jobs["pipeline:Spend"]
    out_topic = pipe.spec.output_topic
    want = {(j.hash, 0) for j in jobs.values()}
    t_commit = time.monotonic()

    def all_beating() -> bool:
        b = beats(s)
        return all(k in b and b[k][0].startswith("run:") and b[k][1] < 5 for k in want)

    wait_for(all_beating, 240, "a live run per job partition")
    started_s = time.monotonic() - t_commit
    ev = in_order_events(600)
    produce_rows(s, pipe.spec.inputs[0].topic, to_records(ev.iloc[:300]), partitions=1)
    wait_for(lambda: len(read_topic(s, out_topic, 1, timeout=5)) >= 300, 120, "first outputs")

    old_owner = beats(s)[(pipe.hash, 0)][0]
    os.kill(pid_of(s, pipe.hash), signal.SIGKILL)
    t_kill = time.monotonic()
    produce_rows(s, pipe.spec.inputs[0].topic, to_records(ev.iloc[300:]), partitions=1)

    def relaunched() -> bool:
        owner, age = beats(s)[(pipe.hash, 0)]
        return owner != old_owner and age < 5

    wait_for(relaunched, 180, "the killed run to be relaunched")
    relaunch_s = time.monotonic() - t_kill
    wait_for(lambda: len(read_topic(s, out_topic, 1, timeout=5)) >= 600, 120, "all outputs")
    time.sleep(2)
    got = read_topic(s, out_topic, 1)
    assert len(got) == 600, f"{len(got)} outputs for 600 events: exactly-once broken"
    print(f"\nruns up {started_s:.1f}s after commit; killed run relaunched in {relaunch_s:.1f}s")

    # the runs serve lookups too: each registers its endpoint, the client routes to it
    keys = pd.DataFrame({"uid": list(range(20))})
    at = pd.Series([repo.T0 + pd.Timedelta(hours=3)] * 20)
    want, _ = mock_run(datasets, ev).lookup("Spend", keys, at)
    with LocalClient(s) as c:
        got, found = c.lookup("Spend", keys, timestamps=at)
    assert found.all()
    assert to_records(got[["uid", "total", "n"]]) == to_records(want[["uid", "total", "n"]])

    # removing Spend removes its jobs: their runs stop and stop heartbeating
    with LocalClient(s) as c:
        c.commit("drop Spend", datasets=repo.graph(f"{s.namespace}.raw", spend_deleted=True))
    gone = {j.hash for name, j in jobs.items() if name.endswith(":Spend")}

    def stopped() -> bool:
        b = beats(s)
        return all(b.get((h, 0), ("", 99.0))[1] > 8 for h in gone)

    wait_for(stopped, 120, "the removed dataset's runs to stop")
