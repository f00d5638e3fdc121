"""While ``fennel-dagster dev`` stops, the engine keep-alive launches nothing.

The stop cancels the engine runs still queued; a keep-alive tick in between saw those
partitions without a live run and queued a new run for one of them (found in a CI run of
the demo: ``UserSpend.offline/0`` launched twice). The stop now marks the Dagster home
first, and the sensor stands down while the marking process lives.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from dagster import DagsterInstance, SensorResult, SkipReason, build_sensor_context

from fennel_dagster.dagster_home import STOPPING_FILE, mark_stopping, stopping
from fennel_dagster.settings import Settings, get_settings
from tests.engine import repo
from tests.engine.harness import commit


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_a_stop_mark_holds_only_while_its_process_lives(tmp_path: Path) -> None:
    assert not stopping(tmp_path)  # no mark
    (tmp_path / STOPPING_FILE).write_text("not a pid")
    assert not stopping(tmp_path)
    mark_stopping(tmp_path, _dead_pid())
    assert not stopping(tmp_path)  # a session that died (SIGKILL) says nothing
    mark_stopping(tmp_path, os.getpid())
    assert stopping(tmp_path)


@pytest.mark.services
def test_the_keepalive_launches_nothing_while_the_session_stops(
    engine_settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    s = engine_settings
    jobs = commit(s, repo.graph(f"{s.namespace}.raw"))
    for k, v in s.as_env().items():
        monkeypatch.setitem(os.environ, k, v)
    get_settings.cache_clear()
    try:
        from resources import FennelSettings
        from sensors.engine import STANDING_DOWN, engine_keepalive

        with DagsterInstance.ephemeral(tempdir=str(tmp_path)) as instance:
            context = build_sensor_context(
                instance=instance, resources={"fennel": FennelSettings()}
            )
            mark_stopping(instance.root_directory, os.getpid())
            held = engine_keepalive(context)
            assert isinstance(held, SkipReason) and held.skip_message == STANDING_DOWN, held

            mark_stopping(instance.root_directory, _dead_pid())  # that session is gone
            launched = engine_keepalive(context)
            assert isinstance(launched, SensorResult), launched
            keys = sorted(r.partition_key or "" for r in launched.run_requests or [])
            assert len(keys) == sum(j.partitions for j in jobs.values()), keys
    finally:
        get_settings.cache_clear()
