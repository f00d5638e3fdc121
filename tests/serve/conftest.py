"""Query-server fixtures: a platform schema of the test module's own, the example repo
committed, a real engine (supervisor + runner processes) and a real ``fennel-dagster serve``
process in front of it, over real HTTP."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pandas as pd
import pytest
from confluent_kafka import Producer

from examples.payments.datasets import DATASETS
from examples.payments.events import generate
from examples.payments.featuresets import FEATURESETS
from fennel_dagster.client import Client, LocalClient
from fennel_dagster.engine.supervisor import Supervisor
from fennel_dagster.metadata import tokens
from fennel_dagster.metadata.db import connect
from fennel_dagster.mock import MockClient
from fennel_dagster.ops.rows import to_records
from fennel_dagster.settings import Settings
from tests.engine.harness import wait_for
from tests.engine.test_example_end_to_end import TOPIC, fresh_topic
from tests.platform import drop_platform


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Serving:
    settings: Settings
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def token(
        self,
        name: str,
        scopes: tuple[str, ...] = ("query",),
        branches: tuple[str, ...] = ("*",),
        entities: tuple[str, ...] = ("*",),
    ) -> str:
        with connect(self.settings, self.settings.pg_schema, autocommit=True) as conn:
            token = tokens.create(conn, name, scopes, branches, entities)[1]
        deadline = time.monotonic() + 10  # the server hears of it by NOTIFY, within ms
        while httpx.get(f"{self.url}/api/v1/branch/list", timeout=5,
                        headers={"Authorization": f"Bearer {token}"}).status_code == 401:  # fmt: skip
            assert time.monotonic() < deadline, "the query server never learnt of a new token"
            time.sleep(0.02)
        return token


def start_server(s: Settings, log: Path, *extra: str) -> Serving:
    port = free_port()
    env = {**os.environ, **s.as_env()}
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fennel_dagster.cli.main", "serve", "--port", str(port),
             "--executors", "1", *extra],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://{s.host}:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return Serving(s, url, proc, log)
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"query server did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.3)


@pytest.fixture(scope="package")
def platform(live_stack: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    name = f"q{uuid.uuid4().hex[:10]}"
    s = live_stack.with_(
        pg_schema=name, namespace=name, partitions=2,
        state_dir=tmp_path_factory.mktemp("state"), engine_snapshot_interval_s=5.0,
        engine_txn_interval_ms=50, engine_poll_interval_s=0.5, engine_lease_s=5.0,
        serve_stats_interval_s=1.0,
    )  # fmt: skip
    yield s
    drop_platform(s)


@pytest.fixture(scope="package")
def engine(platform: Settings) -> Iterator[Supervisor]:
    with LocalClient(platform) as c:
        c.recover(wait=0)  # migrates the schema
    sup = Supervisor(platform, engine_id="serve-test")
    sup.start_lookups()
    t = threading.Thread(target=sup.serve, daemon=True)
    t.start()
    yield sup
    sup.stop()
    t.join(120)


@pytest.fixture(scope="package")
def serving(
    platform: Settings, engine: Supervisor, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Serving]:
    srv = start_server(platform, tmp_path_factory.mktemp("serve") / "server.log")
    yield srv
    srv.process.terminate()
    try:
        srv.process.wait(20)
    except subprocess.TimeoutExpired:
        srv.process.kill()


@pytest.fixture(scope="package")
def loaded(serving: Serving):  # type: ignore[no-untyped-def]
    """The example committed through the server, its events in, every transaction counted."""
    s = serving.settings
    fresh_topic(s, 2)
    ev = generate(n_users=12, n_merchants=6, n_transactions=300, days=3)
    admin = Client(serving.url, serving.token("admin", ("admin",)))
    outcome = admin.commit("payments", datasets=DATASETS, featuresets=FEATURESETS)
    assert outcome.json()["commit_id"] > 0
    assert admin.log("ops_webhook", "merchants", ev.merchants).accepted == len(ev.merchants)
    assert admin.log("ops_webhook", "users", ev.users).accepted == len(ev.users)
    mids = pd.DataFrame({"merchant_id": ev.merchants.merchant_id})
    later = pd.Series([ev.transactions.ts.max()] * len(mids))

    def merchants_indexed() -> bool:
        try:
            return bool(admin.lookup("Merchant", mids, timestamps=later)[1].all())
        except LookupError:
            return False

    wait_for(merchants_indexed, 300, "merchants indexed")
    time.sleep(3)
    p = Producer({"bootstrap.servers": s.kafka_servers})
    for rec in to_records(ev.transactions):
        p.produce(TOPIC, json.dumps(rec).encode(), partition=rec["uid"] % 2)
    assert p.flush(30) == 0
    uids = pd.DataFrame({"uid": sorted(ev.transactions.uid.unique())})
    end = pd.Series([ev.transactions.ts.max() + pd.Timedelta(minutes=1)] * len(uids))

    def all_counted() -> bool:
        try:
            df, found = admin.lookup("UserSpend", uids, timestamps=end)
        except LookupError:
            return False
        return bool(found.all()) and int(df.txns_forever.sum()) == len(ev.transactions)

    wait_for(all_counted, 300, "every transaction aggregated")
    mock = MockClient()
    mock.commit("payments", datasets=DATASETS, featuresets=FEATURESETS)
    mock.log("ops_webhook", "merchants", ev.merchants)
    mock.log("ops_webhook", "users", ev.users)
    mock.log("Transaction", ev.transactions)
    return admin, mock, ev, end.iloc[0]
