"""``fennel-dagster dev``: the Dagster UI and daemon against the local stack.

Runs ``dg dev`` (what Dagster recommends over the superseded ``dagster dev``) on the
project's workspace, from DAGSTER_HOME: so the instance is the stack's, and a ``.env`` or
``dagster.yaml`` in the caller's folder cannot redirect it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from fennel_dagster.dagster_home import mark_stopping, prepare_dagster_home
from fennel_dagster.engine import keepalive
from fennel_dagster.settings import Settings, get_settings, project_root
from fennel_dagster.stack.process import StackError

STAND_DOWN_S = 2.0  # from the keep-alive's stand-down to cancelling queued runs


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("dev", help="run `dg dev -w workspace.yaml` against the local stack")
    p.add_argument(
        "--workspace",
        default=None,
        help="workspace file (default: workspace.yaml of the project root)",
    )
    p.add_argument(
        "--log-file",
        default=None,
        help="write Dagster's own output to this file instead of the terminal",
    )
    p.set_defaults(func=run)


def _default_sigint() -> None:
    # A child started from a shell with `&` inherits SIGINT ignored; dagster dev must see it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def run(args: argparse.Namespace) -> int:
    settings = get_settings()
    env = prepare_dagster_home(settings)
    workspace = Path(args.workspace or project_root() / "workspace.yaml").resolve()
    if not workspace.is_file():
        raise StackError(f"no Dagster workspace at {workspace}: run from the project checkout")
    dg = Path(sys.executable).with_name("dg")
    argv = [
        str(dg), "dev", "-w", str(workspace),
        "-h", settings.host, "-p", str(settings.dagster_port),
    ]  # fmt: skip
    print(f"Dagster UI on {settings.dagster_url} (DAGSTER_HOME={env['DAGSTER_HOME']})", flush=True)
    # the code server and daemon see exactly these settings (ports, home), not re-derived ones;
    # the project root on the path, as `dagster dev` in the root would have it
    path = os.pathsep.join(p for p in (str(workspace.parent), os.environ.get("PYTHONPATH")) if p)
    child_env = {**os.environ, **settings.as_env(), **env, "PYTHONPATH": path}
    out = open(args.log_file, "ab") if args.log_file else None  # noqa: SIM115 - lives with proc
    # a session of its own: a terminal's Ctrl-C reaches only us, and we stop it in order
    proc = subprocess.Popen(argv, env=child_env, cwd=env["DAGSTER_HOME"],
                            preexec_fn=_default_sigint, stdout=out, start_new_session=True,
                            stderr=subprocess.STDOUT if out else None)  # fmt: skip

    def forward(signum: int, _frame: object) -> None:
        # the keep-alive stands down first: it would replace each run cancelled below with a
        # new one; a tick already past its own check has its runs queued within a second
        mark_stopping(env["DAGSTER_HOME"], os.getpid())
        time.sleep(STAND_DOWN_S)
        # queued engine runs first: else the run queue may dequeue one while dg dev shuts
        # down, and fail it ("Location fennel_dagster does not exist in workspace")
        with contextlib.suppress(Exception):
            close_engine_runs(settings, env["DAGSTER_HOME"], queued_only=True)
        proc.send_signal(signal.SIGINT)  # dagster dev shuts its children down on SIGINT

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    try:
        return proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
        end_session(proc.pid)
        if out is not None:
            out.close()
        close_engine_runs(settings, env["DAGSTER_HOME"])


def close_engine_runs(settings: Settings, dagster_home: str, queued_only: bool = False) -> None:
    """The engine runs ended with this session: say so in the instance, so none stays
    "started" (holding its partition's slot) until the next keep-alive tick notices.
    ``queued_only``: those not launched yet, before the session stops."""
    from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
    from dagster._core.instance.ref import InstanceRef

    live = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
            DagsterRunStatus.STARTED]  # fmt: skip
    if queued_only:
        live = [DagsterRunStatus.QUEUED]
    with DagsterInstance.from_ref(InstanceRef.from_dir(dagster_home)) as instance:
        for run in instance.get_runs(filters=RunsFilter(
            job_name=keepalive.ENGINE_JOB, statuses=live,
            tags={keepalive.SCHEMA_TAG: settings.pg_schema},
        )):  # fmt: skip
            instance.report_run_canceled(run, message="fennel-dagster dev stopped, and its runs")


def end_session(pgid: int, grace_s: float = 15.0) -> None:
    """What dg dev leaves behind (its code server's run workers: engine runs) is stopped:
    SIGTERM, then SIGKILL for what outlives the grace period."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)
