"""``fennel-dagster engine``: run an engine (supervisor + runners + lookup endpoint)."""

from __future__ import annotations

import argparse
import logging
import signal
import socket
from typing import Any

from fennel_dagster.settings import get_settings


def register(sub: Any) -> None:
    p = sub.add_parser(
        "engine",
        help="run a streaming engine: owns job partitions by consistent hashing, runs them",
    )
    p.add_argument(
        "--id",
        default=None,
        help="engine id (default: engine-<hostname>, stable across restarts so its local state "
        "is reused; give a second engine on the same host an id of its own)",
    )
    p.add_argument("--port", type=int, default=None, help="lookup endpoint port (default: any)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fennel_dagster.engine.supervisor import (
        Supervisor,  # keeps `--help` and other commands fast
    )

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = get_settings()
    if args.port is not None:
        settings = settings.with_(engine_port=args.port)
    sup = Supervisor(settings, engine_id=args.id or f"engine-{socket.gethostname()}")
    signal.signal(signal.SIGTERM, lambda *_: sup.stop())
    signal.signal(signal.SIGINT, lambda *_: sup.stop())
    sup.start_lookups()
    print(f"engine {sup.engine_id} serving lookups on {sup.address}", flush=True)
    sup.serve()
    return 0
