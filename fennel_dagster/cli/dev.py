"""``fennel-dagster dev``: the Dagster UI and daemon against the local stack."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

from fennel_dagster.dagster_home import prepare_dagster_home
from fennel_dagster.settings import get_settings, project_root
from fennel_dagster.stack.process import StackError


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("dev", help="run `dagster dev -w workspace.yaml` against the local stack")
    p.add_argument(
        "--workspace",
        default=None,
        help="workspace file (default: workspace.yaml of the project root)",
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
    dagster = Path(sys.executable).with_name("dagster")
    argv = [
        str(dagster), "dev", "-w", str(workspace),
        "-h", settings.host, "-p", str(settings.dagster_port),
    ]  # fmt: skip
    print(f"Dagster UI on {settings.dagster_url} (DAGSTER_HOME={env['DAGSTER_HOME']})", flush=True)
    # the code server and daemon see exactly these settings (ports, home), not re-derived ones
    child_env = {**os.environ, **settings.as_env(), **env}
    proc = subprocess.Popen(argv, env=child_env, cwd=workspace.parent, preexec_fn=_default_sigint)

    def forward(signum: int, _frame: object) -> None:
        proc.send_signal(signal.SIGINT)  # dagster dev shuts its children down on SIGINT

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    try:
        return proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
