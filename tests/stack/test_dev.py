"""`fennel-dagster dev` serves the UI against the stack and stops cleanly on a signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from fennel_dagster.settings import Settings
from fennel_dagster.stack import proctree
from fennel_dagster.stack.process import port_open, wait_for

pytestmark = pytest.mark.services

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_dev_serves_the_ui_and_stops_with_all_children_on_signal(
    live_stack: Settings, sig: signal.Signals
) -> None:
    # ports beside the configured UI port, so parallel stacks (CI clones) never share one
    port = live_stack.dagster_port + (391 if sig == signal.SIGTERM else 392)
    env = {**os.environ, **live_stack.as_env(), "FENNEL_DAGSTER_PORT": str(port)}
    cli = Path(sys.executable).with_name("fennel-dagster")
    # started the way a shell's `&` starts it: SIGINT ignored, which dev must undo for dagster
    proc = subprocess.Popen(
        [str(cli), "dev"], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN), start_new_session=True,
    )  # fmt: skip
    try:
        assert wait_for(lambda: port_open(live_stack.host, port), 180, interval=1.0)
        url = f"http://{live_stack.host}:{port}/server_info"
        assert wait_for(lambda: urllib.request.urlopen(url, timeout=5).status == 200, 60)
        family = {*proctree.descendants(proc.pid), proc.pid}
        assert len(family) >= 3  # dev, dagster dev, webserver, daemon, code server
        time.sleep(1)
        proc.send_signal(sig)
        assert proc.wait(timeout=60) is not None
        assert wait_for(lambda: not any(Path(f"/proc/{p}").exists() for p in family), 30), (
            f"left behind: {[p for p in family if Path(f'/proc/{p}').exists()]}"
        )
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
