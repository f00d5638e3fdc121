"""Freshness through a query server: a row logged over HTTP -> visible in a query answer.

    .venv/bin/python -m bench.freshness_bench [--events 100]

In a throwaway metadata schema and topic namespace, with the platform's default engine
settings: an engine (`fennel-dagster engine`) and a query server (`fennel-dagster serve`) as
processes of their own, a keyed dataset fed by a webhook and a featureset looking it up.
Each event sets a new value for a key through `POST /api/v1/log`; the clock runs from
sending it until a `POST /api/v1/query` (polled every 2 ms) answers the new value: the
webhook inbox, the source job, the dataset topic, the index job, the engine's lookup and
the server, end to end. Prints a Markdown table (also written to bench/results/freshness.md).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

import httpx
import numpy as np
import pandas as pd

from fennel_dagster import dataset, feature, featureset, field, meta, source
from fennel_dagster.client import Client, LocalClient
from fennel_dagster.engine.lookup_client import EngineUnavailable
from fennel_dagster.metadata import tokens
from fennel_dagster.metadata.db import connect
from fennel_dagster.settings import Settings, get_settings
from fennel_dagster.sources import Webhook

hook = Webhook(name="fresh_hook")


@meta(owner="bench@example.com")
@source(hook.endpoint("values"), disorder="1d", cdc="upsert")
@dataset(index=True)
class Latest:
    key: int = field(key=True)
    value: str
    ts: datetime


@meta(owner="bench@example.com")
@featureset
class Fresh:
    key: int
    value: str = feature(Latest.value, default="")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawn(s: Settings, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "fennel_dagster.cli.main", *argv],
                                env={**os.environ, **s.as_env()}, stdout=out,
                                stderr=subprocess.STDOUT)  # fmt: skip


def _wait(cond, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def run(events: int, work: Path) -> list[float]:
    name = f"fresh{uuid.uuid4().hex[:8]}"
    s = get_settings().with_(pg_schema=name, namespace=name, partitions=2, state_dir=work / "state")
    with LocalClient(s) as c:
        c.recover(wait=0)
    port = _port()
    procs = [_spawn(s, ["engine", "--id", "fresh-bench"], work / "engine.log"),
             _spawn(s, ["serve", "--port", str(port)], work / "server.log")]  # fmt: skip
    url = f"http://{s.host}:{port}"
    try:
        _wait(lambda: _up(url), 90, "the query server")
        with connect(s, s.pg_schema, autocommit=True) as conn:
            token = tokens.create(conn, "freshness-bench", ("admin",))[1]
        client = Client(url, token)
        _wait(lambda: _known(url, token), 10, "the token")
        client.commit("freshness", datasets=[Latest], featuresets=[Fresh])
        keys = list(range(10))
        now = pd.Timestamp.now(tz="UTC")
        client.log("fresh_hook", "values", pd.DataFrame(
            {"key": keys, "value": ["v-start"] * 10, "ts": [now] * 10}))  # fmt: skip
        _wait(lambda: _values(client, keys) == ["v-start"] * 10, 300, "the engine's first rows")
        out = []
        for i in range(events):
            key, value = keys[i % len(keys)], f"v{i}"
            row = pd.DataFrame({"key": [key], "value": [value], "ts": [pd.Timestamp.now(tz="UTC")]})
            t0 = time.perf_counter()
            client.log("fresh_hook", "values", row)
            while _values(client, [key]) != [value]:
                if time.perf_counter() - t0 > 30:
                    raise SystemExit(f"event {i} not visible after 30 s")
                time.sleep(0.002)
            out.append(time.perf_counter() - t0)
        return out
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
        with LocalClient(s) as c:
            c.delete_branch("main", even_main=True)
        with connect(s) as conn:
            conn.execute(f"DROP SCHEMA {s.pg_schema} CASCADE")
            conn.commit()


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _known(url: str, token: str) -> bool:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.get(f"{url}/api/v1/branch/list", headers=headers, timeout=5).status_code != 401


def _values(client: Client, keys: list[int]) -> list[str] | None:
    try:
        df = client.query(["Fresh.key"], ["Fresh.value"], pd.DataFrame({"Fresh.key": keys}))
    except EngineUnavailable:
        return None
    return [str(v) for v in df["Fresh.value"]]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=100)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="fd-fresh-") as work:
        seconds = run(args.events, Path(work))
    ms = np.array(seconds) * 1000
    s = get_settings()
    table = "\n".join([
        "# Freshness through a query server",
        "",
        f"`python -m bench.freshness_bench --events {args.events}`: a row logged over HTTP until "
        "a query through the server answers it (webhook inbox -> source job -> dataset topic -> "
        f"index job -> engine lookup -> server). Engine settings as shipped: a batch fills for "
        f"{s.engine_txn_interval_ms} ms at most after its first message. One machine (2 cores), one run.",
        "",
        "| events | p50 ms | p90 ms | p99 ms | max ms | target p99 |",
        "|---:|---:|---:|---:|---:|---|",
        f"| {len(ms)} | {np.percentile(ms, 50):.0f} | {np.percentile(ms, 90):.0f} | "
        f"{np.percentile(ms, 99):.0f} | {ms.max():.0f} | "
        f"≤ 1000 ms: {'met' if np.percentile(ms, 99) <= 1000 else 'not met'} |",
    ])  # fmt: skip
    print(table)
    out = Path(__file__).parent / "results" / "freshness.md"
    out.write_text(table + "\n")


if __name__ == "__main__":
    main()
