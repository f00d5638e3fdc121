"""`stack up` is idempotent, `down` stops exactly our processes, `status` tells the truth.

The down/status test runs a throwaway PostgreSQL in its own home and port so the shared
stack other tests use stays up.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from fennel_dagster import stack
from fennel_dagster.settings import Settings

pytestmark = pytest.mark.services


def test_second_up_is_a_no_op_that_keeps_the_same_processes(live_stack: Settings) -> None:
    first = {s.name: s.pid for s in stack.status(live_stack)}
    again = stack.up(live_stack)
    assert all(s.action == "already running" for s in again), [s.line() for s in again]
    assert {s.name: s.pid for s in again} == first


@pytest.fixture
def throwaway_home(live_stack: Settings, unique_name: str) -> Iterator[Path]:
    """A home beside the shared stack's (pytest's tmp dirs are closed to the postgres user)."""
    home = live_stack.home_dir / "test-homes" / unique_name
    yield home
    shutil.rmtree(home, ignore_errors=True)


def test_down_stops_our_process_and_status_reports_it_stopped(
    live_stack: Settings, throwaway_home: Path
) -> None:
    throwaway = live_stack.with_(home=throwaway_home, pg_port=live_stack.pg_port + 67)
    started = stack.up(throwaway, ["postgres"])
    pid = started[0].pid
    assert started[0].health.ok and pid is not None
    assert stack.status(throwaway, ["postgres"])[0].health.ok

    stopped = stack.down(throwaway, ["postgres"])
    assert stopped[0].action == f"stopped pid {pid}"
    assert not os.path.exists(f"/proc/{pid}") or _is_zombie(pid)
    status = stack.status(throwaway, ["postgres"])[0]
    assert not status.health.ok and status.health.detail == "stopped"
    assert stack.down(throwaway, ["postgres"])[0].action == "was not running"


def test_a_pid_file_of_someone_elses_process_is_not_ours(
    settings: Settings, tmp_path: Path
) -> None:
    throwaway = settings.with_(home=tmp_path / "home", pg_port=settings.pg_port + 66)
    pid_file = throwaway.home_dir / "run" / "postgres.pid"
    pid_file.parent.mkdir(parents=True)
    pid_file.write_text(f"{os.getpid()}\n")  # this test process: alive, but not our postgres
    assert stack.status(throwaway, ["postgres"])[0].pid is None
    assert stack.down(throwaway, ["postgres"])[0].action == "was not running"
    assert os.path.exists(f"/proc/{os.getpid()}")


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
