"""How runner processes are made, and how they end with their supervisor.

Runners fork from a fork server that has the engine's modules loaded (``PRELOAD``): a fresh
interpreter spends seconds of CPU importing them, so a runner restarted after a crash would
spend them before it catches up again, and an engine's first start once per partition.

Lifetimes are Linux parent-death signals, so a restarted engine never meets orphans holding
RocksDB locks (SIGKILL is safe: exactly-once holds under it; elsewhere the lease and Kafka
fencing remain): the fork server gets SIGKILL when the thread that started it ends
(``start_server`` runs in the supervisor's constructing thread, its main thread in
``fennel-dagster engine``), and each runner when the fork server ends. Both are the kernel's
doing at the moment of death, with no Python in between.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import sys
from multiprocessing import forkserver
from multiprocessing.context import ForkServerContext, SpawnContext

from fennel_dagster.engine import faults

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# loaded once in the fork server, its children start with them; the guard comes first, so
# the server is tied to its parent before it spends seconds importing the rest
PRELOAD = [
    "fennel_dagster.engine.fork_server_guard",
    "fennel_dagster.engine.supervisor",
    "fennel_dagster.engine.jobs.factory",
]


def runner_context() -> ForkServerContext | SpawnContext:
    """Processes for runners: forked from a single-threaded server (no inherited threads,
    locks or clients) with ``PRELOAD`` imported; ``spawn`` where there is no fork."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)  # a no-op once this process's fork server runs
    return ctx


def start_server(ctx: ForkServerContext | SpawnContext) -> None:
    """Start this process's fork server now, from the calling thread: the one whose end
    ends the server (a supervisor's serving thread may come and go)."""
    if isinstance(ctx, ForkServerContext):
        forkserver.ensure_running()


def die_with_parent(parent: int = 0) -> None:
    """SIGKILL this process when the thread that made it ends, however it ends; ``parent``:
    a process that must be alive now (else exit at once: it died before the signal was
    armed)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent:
        try:
            os.kill(parent, 0)
        except ProcessLookupError:
            os._exit(1)


def _leave_fork_server() -> None:
    """Close the fork server's "alive" pipe that a forked runner inherits: the server also
    exits when every holder has closed it, and runners must not keep it for it. (The
    attribute is CPython's own: ``multiprocessing.forkserver`` keeps the fd there.)"""
    server = getattr(forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if server is not None and fd is not None:
        os.close(fd)
        server._forkserver_alive_fd = None


def become_runner(parent: int = 0, environ: dict[str, str] | None = None) -> None:
    """First thing in a runner process: out of the fork server's pipe, tied to its parent,
    with the supervisor's environment as it is now (the fork server's is the one of its own
    start)."""
    _leave_fork_server()
    die_with_parent(parent)
    if environ is not None:
        os.environ.clear()
        os.environ.update(environ)
        faults.arm()
