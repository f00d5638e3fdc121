"""Test helpers shared by suites: a throwaway platform schema, a `dagster dev` to run against."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fennel_dagster.client import LocalClient
from fennel_dagster.dagster_home import prepare_dagster_home
from fennel_dagster.metadata.db import connect
from fennel_dagster.settings import Settings
from fennel_dagster.stack.process import port_open, wait_for

REPO = Path(__file__).resolve().parents[1]


def drop_platform(s: Settings) -> None:
    """Destroy every branch's physical assets, then the metadata schema itself."""
    with LocalClient(s) as client:
        client.recover()
        for branch in client.list_branches():
            client.delete_branch(branch, even_main=True)
    with connect(s) as conn:
        conn.execute(f"DROP SCHEMA {s.pg_schema} CASCADE")
        conn.commit()


@contextmanager
def dagster_dev(s: Settings, log_path: Path, workspace: Path | None = None) -> Iterator[Settings]:
    """`fennel-dagster dev` (webserver + daemon) with ``s``'s settings, stopped on exit."""
    env = {**os.environ, **s.as_env(), **prepare_dagster_home(s), "PYTHONPATH": str(REPO)}
    argv = [str(Path(sys.executable).with_name("fennel-dagster")), "dev"]
    if workspace is not None:
        argv += ["--workspace", str(workspace)]
    log = log_path.open("w")
    proc = subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        assert wait_for(lambda: port_open(s.host, s.dagster_port), 180, interval=1.0)
        yield s
    finally:
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(60)
        # code servers that dagster dev's children started outlive it: end the whole session
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        log.close()
