"""Runner processes fork from a fork server with the engine loaded: they see their
supervisor's environment as it is at their start (not the fork server's), and do not keep
the fork server alive (`test_ride_out_faults` kills a supervisor and sees them die)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from multiprocessing.queues import Queue
from typing import Any

from fennel_dagster.engine import faults
from fennel_dagster.engine.forking import become_runner, runner_context
from tests.engine.chaos import pid_alive


def _report(out: Queue[Any], environ: dict[str, str]) -> None:
    from multiprocessing import forkserver

    become_runner(os.getppid(), environ)
    alive_fd = getattr(forkserver._forkserver, "_forkserver_alive_fd", None)
    out.put((os.environ.get("FENNEL_TEST_MARK"), dict(faults._ARMED), alive_fd))


def _started(ctx: Any, environ: dict[str, str]) -> tuple[Any, float]:
    out = ctx.Queue()
    t0 = time.monotonic()
    proc = ctx.Process(target=_report, args=(out, environ))
    proc.start()
    got = out.get(timeout=60)
    took = time.monotonic() - t0
    proc.join(30)
    assert proc.exitcode == 0
    return got, took


def test_a_runner_sees_its_supervisors_environment_of_now_and_leaves_the_fork_server() -> None:
    ctx = runner_context()
    _started(ctx, dict(os.environ))  # the fork server starts with this environment
    environ = {**os.environ, "FENNEL_TEST_MARK": "now",
               "FENNEL_ENGINE_CRASH": "mid_batch:0.5,after_commit:1"}  # fmt: skip
    (mark, armed, alive_fd), _ = _started(ctx, environ)
    assert mark == "now"
    assert armed == {"mid_batch": 0.5, "after_commit": 1.0}
    assert alive_fd is None  # closed: the fork server ends with the supervisor
    (mark, armed, _), _ = _started(ctx, {k: v for k, v in os.environ.items()
                                         if k != "FENNEL_ENGINE_CRASH"})  # fmt: skip
    assert mark is None and armed == {}


_SERVER_FROM_A_THREAD = """
import threading, time
from multiprocessing import forkserver
from fennel_dagster.engine.forking import runner_context, start_server

def start():
    ctx = runner_context()
    start_server(ctx)
    p = ctx.Process(target=int)  # served: the server has run its preloads
    p.start()
    p.join()
    print(forkserver._forkserver._forkserver_pid, flush=True)

t = threading.Thread(target=start)
t.start()
t.join()  # the thread that started the fork server ends; this process lives on
time.sleep(60)
"""


def test_the_fork_server_dies_with_the_thread_that_started_it() -> None:
    # the kernel's parent-death signal, armed by the server's first preload: no Python in
    # the server has to notice (a supervisor SIGKILLed ends its main thread the same way)
    proc = subprocess.Popen([sys.executable, "-c", _SERVER_FROM_A_THREAD],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        server = int(proc.stdout.readline())
        deadline = time.monotonic() + 30
        while pid_alive(server) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(server), "the fork server outlived the thread that started it"
        assert proc.poll() is None  # the process itself is alive
    finally:
        proc.kill()
        proc.wait(10)
