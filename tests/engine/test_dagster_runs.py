"""Dagster runs the engine: one run per job partition, relaunched when its process dies.

Against `dagster dev` (webserver + daemon) on the Postgres-backed instance and the real
Kafka: SIGKILL a run's process, the keep-alive sensor marks it failed and relaunches it,
and the committed outputs stay exactly once; removing a dataset stops its runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest

from fennel_dagster.client import LocalClient
from fennel_dagster.metadata import registry
from fennel_dagster.metadata.db import connect
from fennel_dagster.ops.rows import to_records
from fennel_dagster.settings import Settings
from tests.engine import repo
from tests.engine.chaos import pid_alive
from tests.engine.expected import mock_run
from tests.engine.harness import commit, create_topic, produce_rows, read_topic, wait_for
from tests.engine.test_exactly_once import in_order_events
from tests.platform import REPO, dagster_dev

pytestmark = pytest.mark.services


@pytest.fixture
def dagster_settings(engine_settings: Settings, tmp_path: Path) -> Settings:
    return engine_settings.with_(
        partitions=1,
        dagster_home=tmp_path / "dagster",
        dagster_port=engine_settings.dagster_port + 393,
    )


@contextmanager
def dagster_engine(s: Settings, tmp_path: Path) -> Iterator[Settings]:
    """`dagster dev` with only the engine's Dagster parts; its engine runs end with it."""
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text(
        "load_from:\n  - python_module:\n      module_name: tests.engine.dagster_defs\n"
        f"      working_directory: {REPO}\n"
    )
    with dagster_dev(s, tmp_path / "dagster.log", workspace):
        try:
            yield s
        finally:
            end_runs(s)


def end_runs(s: Settings, timeout: float = 8.0) -> None:
    """Drop every branch, so every job leaves the registry and the engine runs end by
    themselves (each runner sees it at its next heartbeat) before `dagster dev` stops: its
    shutdown SIGTERMs runs of live jobs, which restart their runner rather than exit, and
    SIGKILLs them only after a 15 s grace. A run whose runner met a destroyed topic first may
    take longer; its stop is set by then, so that SIGTERM ends it at once. Best effort (it
    must not hide the test's own failure): the platform is dropped anyway."""
    with contextlib.suppress(Exception):
        with connect(s, s.pg_schema) as conn:
            rows = conn.execute("SELECT pid FROM runner_heartbeats").fetchall()
        pids = [int(p) for (p,) in rows]
        with LocalClient(s) as c:
            for branch in c.list_branches():
                c.delete_branch(branch, even_main=True)
        wait_for(lambda: not any(pid_alive(p) for p in pids), timeout, "the engine runs to end")


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
    dagster_settings: Settings, tmp_path: Path
) -> None:
    s = dagster_settings
    create_topic(s, f"{s.namespace}.raw", 1)
    datasets = repo.graph(f"{s.namespace}.raw")
    jobs = commit(s, datasets)  # before Dagster starts: the sensor's first tick launches runs
    pipe = jobs["pipeline:Spend"]
    out_topic = pipe.spec.output_topic
    want = {(j.hash, 0) for j in jobs.values()}
    with dagster_engine(s, tmp_path):
        t_start = time.monotonic()

        def all_beating() -> bool:
            b = beats(s)
            return all(k in b and b[k][0].startswith("run:") and b[k][1] < 5 for k in want)

        wait_for(all_beating, 240, "a live run per job partition")
        started_s = time.monotonic() - t_start
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
        print(f"\nruns up {started_s:.1f}s after Dagster started; "
              f"killed run relaunched in {relaunch_s:.1f}s")  # fmt: skip

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
