"""``fennel-dagster demo``: the main job — the stack, Dagster, the example repo, live events.

Starts ``fennel-dagster dev`` (``dg dev``: UI + daemon; the engine runs as one Dagster run
per job partition; Dagster's own output goes to ``fennel-dagster stack logs dagster``),
commits ``examples/payments`` through Dagster (a commit request the commit sensor runs, so
the assets appear in the UI), starts a query server (``fennel-dagster serve``) with a demo
token, sends the merchants through the webhook, then streams card transactions into the
``transactions`` topic in real time. The terminal shows a live status (``demo_status``):
services, commit, engine runs, events/s, freshness and a few users' features queried over
HTTP. Ctrl-C stops the stream, the server, Dagster and its engine runs, in that order.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live

from fennel_dagster.cli.demo_status import Collector, render
from fennel_dagster.cli.dev import end_session
from fennel_dagster.settings import get_settings, project_root
from fennel_dagster.stack.process import StackError

TOPIC = "transactions"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "demo", help="run the example end to end: Dagster UI, engine runs, live events, lookups"
    )
    p.add_argument("--rate", type=float, default=5.0, help="transactions per second")
    p.add_argument("--partitions", type=int, default=1, help="partitions of every job")
    p.add_argument("--seconds", type=float, default=0, help="stop after this long (0: never)")
    p.add_argument("--until-queryable", action="store_true",
                   help="stop once the features were answered over HTTP (a smoke run)")  # fmt: skip
    p.set_defaults(func=run)


def _stream(settings: Any, rate: float, stop: threading.Event, status: Collector) -> None:
    import random

    import pandas as pd
    from confluent_kafka import Producer

    rng = random.Random()
    p = Producer({"bootstrap.servers": settings.kafka_servers, "linger.ms": 5})
    n = 0
    while not stop.is_set():
        n += 1
        row = {
            "txn_id": int(time.time() * 1000) * 10 + n % 10, "uid": rng.randint(1, 50),
            "merchant_id": rng.randint(1, 20), "amount": round(rng.lognormvariate(3.5, 1.0), 2),
            "currency": rng.choice(["EUR", "GBP", "USD"]), "channel": rng.choice(["pos", "web", "app"]),
            "ts": pd.Timestamp.now(tz="UTC").isoformat(),
        }  # fmt: skip
        p.produce(TOPIC, json.dumps(row).encode())
        p.poll(0)
        status.produced = n
        stop.wait(1.0 / rate)
    p.flush(10)


def run(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AdminClient, NewTopic

    sys.path.insert(0, str(project_root()))  # examples/ lives in the checkout, not the package
    from examples.payments.datasets import DATASETS
    from examples.payments.events import generate
    from examples.payments.featuresets import FEATURESETS
    from fennel_dagster.client import LocalClient
    from fennel_dagster.stack import up

    settings = get_settings().with_(partitions=args.partitions)
    # captured output (a test, CI, `make up > file`) gets a wide plain rendering now and then
    console = Console(width=None if sys.stdout.isatty() else 140)
    for s in up(settings):
        console.print(s.line(), highlight=False)
    admin = AdminClient({"bootstrap.servers": settings.kafka_servers})
    if TOPIC not in admin.list_topics(timeout=10).topics:
        for f in admin.create_topics([NewTopic(TOPIC, args.partitions, 1)]).values():
            f.result(30)
    env = {**os.environ, **settings.as_env()}
    logs = settings.logs_dir
    logs.mkdir(parents=True, exist_ok=True)
    status = Collector(settings)
    status.links = (
        f"Dagster UI {settings.dagster_url}   (its log: fennel-dagster stack logs dagster)",
    )
    status.start()
    with open(logs / "dagster.log", "ab") as out:  # Dagster's own output: `stack logs dagster`
        dev = subprocess.Popen(
            [str(Path(sys.executable).with_name("fennel-dagster")), "dev"],
            cwd=project_root(), env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches the demo only; it stops Dagster in order
        )  # fmt: skip
    stop = threading.Event()
    server: subprocess.Popen[bytes] | None = None
    started = time.monotonic()
    try:
        with _showing(console, status) as show:
            status.phase = (
                "committing examples/payments through Dagster (the commit sensor runs it)"
            )
            with LocalClient(settings, via_dagster=True) as client:
                outcome = client.commit("payments example", datasets=DATASETS,
                                        featuresets=FEATURESETS)  # fmt: skip
                status.phase = f"committed through a Dagster run: {outcome.outcome}"
                client.via_dagster = False
                events = generate()
                client.log("ops_webhook", "users", events.users)
                client.log("ops_webhook", "merchants", events.merchants)
            threading.Thread(target=_stream, args=(settings, args.rate, stop, status),
                             daemon=True).start()  # fmt: skip
            server, url, token = _query_server(settings, env)
            status.query = _features_query(url, token)
            status.links += (
                f"query server {url}   GraphQL {url}/graphql   demo token {token}",
                f"  curl -s {url}/graphql -H 'Authorization: Bearer {token}' "
                "-H 'Content-Type: application/json' "
                '-d \'{"query": "{ userFeatures(uid: 1) { txns1h spend7d country } }"}\'',
            )
            while not args.seconds or time.monotonic() - started < args.seconds:
                show()
                if args.until_queryable and status.latest.features is not None:
                    break
                time.sleep(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not cut the stop short
        stop.set()
        status.stop()
        console.print("stopping: the event stream, the query server, Dagster and its engine runs")
        if server is not None:
            server.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.wait(15)
        dev.send_signal(signal.SIGINT)  # fennel-dagster dev stops dg dev and its runs' session
        try:
            dev.wait(120)
        except subprocess.TimeoutExpired:
            end_session(dev.pid, grace_s=5)
        console.print("stopped")
    return 0


def _features_query(url: str, token: str) -> Any:
    import pandas as pd

    from fennel_dagster.client import Client

    http = Client(url, token)
    wanted: list[str | type] = ["UserFeatures.uid", "UserFeatures.txns_1h",
                                "UserFeatures.spend_7d", "UserFeatures.country"]  # fmt: skip
    return lambda: http.query(
        ["UserFeatures.uid"], wanted, pd.DataFrame({"UserFeatures.uid": [1, 2, 3]})
    )


@contextlib.contextmanager
def _showing(console: Console, status: Collector) -> Iterator[Any]:
    """``show()`` redraws the status in place on a terminal; on captured output it prints
    the status every 30 s (and once at the end)."""
    if console.is_terminal:
        with Live(render(status.latest), console=console, refresh_per_second=2) as live:
            yield lambda: live.update(render(status.latest))
        return
    last = [0.0]

    def show() -> None:
        if time.monotonic() - last[0] >= 30:
            last[0] = time.monotonic()
            console.print(render(status.latest))

    try:
        yield show
    finally:
        console.print(render(status.latest))


def _query_server(settings: Any, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str, str]:
    """``fennel-dagster serve`` beside Dagster, and a demo token (query and log scopes)."""
    import httpx

    from fennel_dagster.metadata import tokens
    from fennel_dagster.metadata.db import connect

    log = settings.logs_dir / "query-server.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen([str(Path(sys.executable).with_name("fennel-dagster")), "serve"],
                                env=env, stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    with connect(settings, settings.pg_schema, autocommit=True) as conn:
        token = tokens.create(conn, "demo", ("query", "log"))[1]
    url = f"http://{settings.host}:{settings.serve_port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:  # e.g. the port is taken (another server still runs)
            last = log.read_text(errors="replace").strip().splitlines()[-1:] or ["?"]
            raise StackError(f"the query server exited at start ({last[0]}); see "
                             "`fennel-dagster stack logs query-server`")  # fmt: skip
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.5)
    return proc, url, token
