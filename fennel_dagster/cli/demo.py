"""``fennel-dagster demo``: the main job — the stack, Dagster, the example repo, live events.

Starts `dagster dev` (UI + daemon; the engine runs as one Dagster run per job partition),
commits ``examples/payments`` through Dagster (a commit request the commit sensor runs, so
the assets appear in the UI), starts a query server (``fennel-dagster serve``) with a demo
token, sends the merchants through the webhook, then streams card transactions into the
``transactions`` topic in real time and prints a few users' features, queried over HTTP,
every 30 s. Ctrl-C stops the stream, the server and Dagster.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from fennel_dagster.settings import get_settings, project_root

TOPIC = "transactions"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "demo", help="run the example end to end: Dagster UI, engine runs, live events, lookups"
    )
    p.add_argument("--rate", type=float, default=5.0, help="transactions per second")
    p.add_argument("--partitions", type=int, default=1, help="partitions of every job")
    p.add_argument("--seconds", type=float, default=0, help="stop after this long (0: never)")
    p.set_defaults(func=run)


def _stream(settings: Any, rate: float, stop: threading.Event) -> None:
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
        stop.wait(1.0 / rate)
    p.flush(10)


def run(args: argparse.Namespace) -> int:
    import pandas as pd
    from confluent_kafka.admin import AdminClient, NewTopic

    sys.path.insert(0, str(project_root()))  # examples/ lives in the checkout, not the package
    from examples.payments.datasets import DATASETS
    from examples.payments.events import generate
    from examples.payments.featuresets import FEATURESETS
    from fennel_dagster.client import Client, LocalClient
    from fennel_dagster.stack import up

    settings = get_settings().with_(partitions=args.partitions)
    up(settings)
    admin = AdminClient({"bootstrap.servers": settings.kafka_servers})
    if TOPIC not in admin.list_topics(timeout=10).topics:
        for f in admin.create_topics([NewTopic(TOPIC, args.partitions, 1)]).values():
            f.result(30)
    env = {**os.environ, **settings.as_env()}
    dev = subprocess.Popen(
        [str(Path(sys.executable).with_name("fennel-dagster")), "dev"], cwd=project_root(), env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    server: subprocess.Popen[bytes] | None = None
    try:
        with LocalClient(settings, via_dagster=True) as client:
            print("committing examples/payments through Dagster ...", flush=True)
            client.commit("payments example", datasets=DATASETS, featuresets=FEATURESETS)
            client.via_dagster = False
            events = generate()
            client.log("ops_webhook", "users", events.users)
            client.log("ops_webhook", "merchants", events.merchants)
            threading.Thread(target=_stream, args=(settings, args.rate, stop), daemon=True).start()
            server, url, token = _query_server(settings, env)
            print(f"streaming {args.rate}/s into {TOPIC!r}; UI at {settings.dagster_url}\n"
                  f"query server at {url} (GraphQL at {url}/graphql), demo token {token}\n"
                  f"  curl -s {url}/graphql -H 'Authorization: Bearer {token}' "
                  "-H 'Content-Type: application/json' "
                  "-d '{\"query\": \"{ userFeatures(uid: 1) { txns1h spend7d country } }\"}'",
                  flush=True)  # fmt: skip
            started = time.monotonic()
            http = Client(url, token)
            while not stop.wait(30):
                uids = pd.DataFrame({"UserFeatures.uid": [1, 2, 3]})
                wanted: list[str | type] = ["UserFeatures.uid", "UserFeatures.txns_1h",
                                            "UserFeatures.spend_7d",
                          "UserFeatures.country"]  # fmt: skip
                try:
                    df = http.query(["UserFeatures.uid"], wanted, uids)
                    print(df.rename(columns=lambda c: c.split(".", 1)[1]).to_string(index=False),
                          flush=True)  # fmt: skip
                except Exception as e:  # noqa: BLE001 - engine runs still starting
                    print(f"(features not queryable yet: {e})", flush=True)
                if args.seconds and time.monotonic() - started > args.seconds:
                    break
    finally:
        stop.set()
        if server is not None:
            server.terminate()
        dev.send_signal(signal.SIGINT)
        try:
            dev.wait(60)
        except subprocess.TimeoutExpired:
            dev.kill()
    return 0


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
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.5)
    return proc, url, token
