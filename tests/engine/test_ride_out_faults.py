"""Faults an operator meets, on the running engine (real Postgres, Kafka, S3; faults made by
stopping and starting the services and by SIGKILL):

- Postgres restarts under a running engine: the supervisor reconnects by itself, lookups
  resume within a bounded time, outputs stay exactly once.
- Only the supervisor is SIGKILLed: no runner outlives it, and an engine started again under
  the same id serves within a bounded time.
- Postgres stops mid-commit: one clear message; recovery then leaves no strays.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
from dagster import DagsterInstance, SensorResult, SkipReason, build_sensor_context

from fennel_dagster import stack
from fennel_dagster.client import LocalClient
from fennel_dagster.commit import crashpoints
from fennel_dagster.commit.protocol import MetadataUnavailableError
from fennel_dagster.engine.supervisor import Supervisor
from fennel_dagster.errors import FennelError
from fennel_dagster.metadata import registry
from fennel_dagster.metadata.db import connect
from fennel_dagster.ops.rows import to_records
from fennel_dagster.settings import Settings, get_settings
from fennel_dagster.stack import proctree
from tests.commit_protocol.invariants import assert_invariants
from tests.engine import repo
from tests.engine.chaos import pid_alive
from tests.engine.expected import as_multiset, mock_rows, mock_run
from tests.engine.harness import (
    commit,
    create_topic,
    engine_process,
    produce_rows,
    read_topic,
    wait_for,
)
from tests.engine.test_exactly_once import COLS, KEYS, in_order_events

pytestmark = pytest.mark.services


def counted(s: Settings, at: pd.Timestamp) -> int | None:
    """How many events Spend's lookups count at ``at`` (None: not answerable yet)."""
    try:
        with LocalClient(s) as c:
            df, found = c.lookup("Spend", KEYS, timestamps=pd.Series([at] * len(KEYS)))
    except (FennelError, LookupError, OSError):
        return None
    return int(df.n.fillna(0).sum()) if found.any() else 0


def mock_count(datasets: list[type], ev: pd.DataFrame, at: pd.Timestamp) -> int:
    df, _ = mock_run(datasets, ev).lookup("Spend", KEYS, pd.Series([at] * len(KEYS)))
    return int(df.n.fillna(0).sum())


def _stream_health(s: Settings, monkeypatch: pytest.MonkeyPatch) -> SensorResult | SkipReason:
    """One tick of the stream-health sensor, as the Dagster daemon runs it."""
    for k, v in s.as_env().items():
        monkeypatch.setitem(os.environ, k, v)
    get_settings.cache_clear()
    try:
        from resources import KafkaResource, MetadataStore
        from sensors.health import stream_health

        with DagsterInstance.ephemeral() as instance:
            context = build_sensor_context(
                instance=instance,
                resources={"metadata": MetadataStore(), "kafka": KafkaResource()},
            )
            return stream_health(context)
    finally:
        get_settings.cache_clear()


def _observed_outages(s: Settings, monkeypatch: pytest.MonkeyPatch) -> str:
    """What the stream-health sensor shows on Spend's Dagster asset about outages."""
    observed = _stream_health(s, monkeypatch)
    assert isinstance(observed, SensorResult), observed
    spend = next(e for e in observed.asset_events or [] if e.asset_key.path[-1] == "Spend")
    return str(spend.metadata["outages ridden out (24 h)"].value)


@pytest.mark.exclusive  # stops the stack's shared Postgres
def test_the_engine_rides_out_a_postgres_restart(
    engine_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = engine_settings
    # Txn's source topic exists, as in production (its source runners then start at once)
    create_topic(s, f"{s.namespace}.raw")
    datasets = repo.graph(f"{s.namespace}.raw")
    jobs = commit(s, datasets)
    pipe = jobs["pipeline:Spend"]
    first, second = in_order_events(400), in_order_events(400, 400)
    sup = Supervisor(s, engine_id="pg-restart")
    sup.start_lookups()
    t = threading.Thread(target=sup.serve, daemon=True)
    t.start()
    end = first.ts.max()
    both = pd.concat([first, second], ignore_index=True)
    n1, n2 = mock_count(datasets, first, end), mock_count(datasets, both, second.ts.max())
    try:
        produce_rows(s, pipe.spec.inputs[0].topic, to_records(first), by="uid")
        wait_for(lambda: counted(s, end) == n1, 120, "lookups before the restart")
        stack.down(s, ["postgres"])
        produce_rows(s, pipe.spec.inputs[0].topic, to_records(second), by="uid")
        time.sleep(3)  # the engine notices: its polls fail, it starts reconnecting
        assert sup.outage.active
        assert _metric(sup, "fennel_dependency_unreachable") == 1.0  # alertable while it lasts
        tick = _stream_health(s, monkeypatch)  # a sensor tick: one plain reason, no traceback
        assert isinstance(tick, SkipReason) and "unreachable" in (tick.skip_message or ""), tick
        t_up = time.monotonic()
        assert all(r.health.ok for r in stack.up(s, ["postgres"]))
        wait_for(lambda: counted(s, second.ts.max()) == n2, 90, "lookups after the restart")
        resumed_s = time.monotonic() - t_up
        assert not sup.outage.active and t.is_alive()  # no engine restart needed
        assert _metric(sup, "fennel_dependency_unreachable") == 0.0
        with connect(s, s.pg_schema, autocommit=True) as conn:
            told = [o for o in registry.recent_outages(conn, 3600) if o.process == "pg-restart"]
        assert len(told) == 1 and told[0].service == "Postgres", told  # said once, for Dagster
        assert 1.0 < told[0].seconds < 120
        shown = _observed_outages(s, monkeypatch)
        assert "pg-restart: Postgres unreachable" in shown, shown  # on the Dagster asset
    finally:
        sup.stop()
        t.join(120)
    got = [r for _, _, r in read_topic(s, pipe.spec.output_topic, 4)]
    mock = mock_run(datasets, both)
    assert as_multiset(got, COLS) == as_multiset(mock_rows(mock, "Spend"), COLS)
    print(f"\nlookups resumed {resumed_s:.1f}s after Postgres came back")


def _metric(sup: Supervisor, name: str) -> float:
    """The supervisor's own gauge, read over its endpoint as Prometheus scrapes it."""
    with urllib.request.urlopen(f"http://{sup.address}/metrics", timeout=5) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith(f'{name}{{process="{sup.engine_id}"'):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} of {sup.engine_id} not in /metrics:\n{text[:2000]}")


def test_runners_die_with_their_supervisor_and_a_restarted_engine_serves(
    engine_settings: Settings, tmp_path: Path
) -> None:
    s = engine_settings
    log = str(tmp_path / "engine.log")
    # Txn's source topic exists, as in production (its source runners then start at once)
    create_topic(s, f"{s.namespace}.raw")
    datasets = repo.graph(f"{s.namespace}.raw")
    jobs = commit(s, datasets)
    pipe = jobs["pipeline:Spend"]
    first, second = in_order_events(300), in_order_events(300, 300)
    end = first.ts.max()
    n1 = mock_count(datasets, first, end)
    n2 = mock_count(datasets, pd.concat([first, second], ignore_index=True), second.ts.max())
    produce_rows(s, pipe.spec.inputs[0].topic, to_records(first), by="uid")
    engine = engine_process(s, "orphans", log)
    restarted = None
    try:
        try:
            wait_for(lambda: counted(s, end) == n1, 180, "the engine serving")
        except AssertionError:
            with LocalClient(s) as c:
                try:
                    got = c.lookup("Spend", KEYS, timestamps=pd.Series([end] * len(KEYS)))
                except Exception as e:  # noqa: BLE001
                    got = e
            raise AssertionError(f"{got!r}\n" + Path(log).read_text()[-1500:]) from None
        runners = proctree.descendants(engine.pid)
        assert len(runners) >= 5, runners  # the runner processes and the fork server
        engine.send_signal(signal.SIGKILL)
        engine.wait(10)
        wait_for(lambda: not any(pid_alive(p) for p in runners), 10, "the runners to die")
        restarted = engine_process(s, "orphans", log)  # same id: same state dir, same RocksDB locks
        t0 = time.monotonic()
        produce_rows(s, pipe.spec.inputs[0].topic, to_records(second), by="uid")
        wait_for(lambda: counted(s, second.ts.max()) == n2, 120, "the restarted engine serving")
        print(f"\nrestarted engine served all events {time.monotonic() - t0:.1f}s after start")
    finally:
        for proc in (engine, restarted):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
    got = [r for _, _, r in read_topic(s, pipe.spec.output_topic, 4)]
    mock = mock_run(datasets, pd.concat([first, second], ignore_index=True))
    assert as_multiset(got, COLS) == as_multiset(mock_rows(mock, "Spend"), COLS)


@pytest.mark.exclusive  # stops the stack's shared Postgres
def test_a_commit_that_loses_postgres_says_so_and_recovery_leaves_no_strays(
    engine_settings: Settings,
) -> None:
    """Postgres stops (really) after the commit created its first assets: the committer gets
    one message naming the state and ``LocalClient.recover()``, not a raw driver error; once
    Postgres is back, recovery rolls the attempt back and nothing stray remains."""
    s = engine_settings
    crashpoints.arm("after_create_asset@3", lambda: stack.down(s, ["postgres"]))
    try:
        with LocalClient(s) as c, pytest.raises(MetadataUnavailableError) as caught:
            c.commit("doomed", datasets=repo.graph(f"{s.namespace}.raw"))
    finally:
        crashpoints.disarm()
        assert all(r.health.ok for r in stack.up(s, ["postgres"]))
    text = str(caught.value)
    assert "LocalClient.recover()" in text and "unfinished" in text, text
    with LocalClient(s) as c:
        c.recover()
        assert_invariants(c)  # topics, prefixes and objects equal the bank's: 0 strays
        assert c.physical.topics(f"{s.namespace}.") == set()
