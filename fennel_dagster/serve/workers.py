"""``serve --workers N``: N query-server processes on one port, each with a socket of its own.

uvicorn's own ``workers=N`` binds one socket in its parent and lets every worker accept from
it. Linux then wakes all of them for a connection and the same idle worker can win every
accept (seen here: one of two workers answered 1,400 requests in a row). A socket per worker
with ``SO_REUSEPORT`` makes the kernel spread connections across the workers by hash, so
this module supervises the workers instead: start them, restart one that dies after it came
up, stop them all on SIGTERM/SIGINT.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import socket
import threading
import time
from multiprocessing.process import BaseProcess
from typing import Any

from fennel_dagster.errors import FennelError

log = logging.getLogger(__name__)

APP = "fennel_dagster.serve.app:app_from_env"
BACKLOG = 2048  # uvicorn's default
STARTUP_S = 10.0  # a worker that dies sooner failed to start: restarting it would only loop
STOP_S = 30.0


class WorkersFailed(FennelError):
    """A query-server worker died while starting (its log says why)."""


def bind(host: str, port: int, shared: bool = True) -> socket.socket:
    """A listening socket that shares ``port`` with the other workers' sockets (``shared``),
    or, unshared, a probe that fails while anything else listens there."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if shared:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise WorkersFailed(f"query server: cannot listen on {host}:{port} ({e}); "
                            "stop what holds the port or pass --port") from e  # fmt: skip
    sock.listen(BACKLOG)
    return sock


def _worker(options: dict[str, Any]) -> None:
    import uvicorn

    sock = bind(options["host"], options["port"])
    config = uvicorn.Config(APP, factory=True, **options)
    uvicorn.Server(config).run(sockets=[sock])


def run_workers(workers: int, options: dict[str, Any]) -> None:
    """Serve with ``workers`` processes until SIGTERM/SIGINT. ``options`` are uvicorn's
    ``Config`` keywords; the app is built in each worker by ``app_from_env``."""
    bind(options["host"], options["port"], shared=False).close()  # a taken port fails here
    spawn = multiprocessing.get_context("spawn")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    def start(i: int) -> tuple[BaseProcess, float]:
        p = spawn.Process(target=_worker, args=(options,), name=f"fennel-serve-{i}")
        p.start()
        return p, time.monotonic()

    running = [start(i) for i in range(workers)]
    try:
        while not stop.wait(0.5):
            for i, (p, started) in enumerate(running):
                if p.is_alive():
                    continue
                if time.monotonic() - started < STARTUP_S:
                    raise WorkersFailed(f"query-server worker {i} (pid {p.pid}) exited with "
                                        f"{p.exitcode} while starting; see its log above")  # fmt: skip
                log.warning("query-server worker %d (pid %s) exited with %s; restarting it",
                            i, p.pid, p.exitcode)  # fmt: skip
                running[i] = start(i)
    finally:
        for p, _ in running:
            if p.is_alive():
                p.terminate()  # uvicorn shuts down gracefully on SIGTERM
        deadline = time.monotonic() + STOP_S
        for p, _ in running:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join()
