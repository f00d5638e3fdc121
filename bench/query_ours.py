"""Our side of the query benchmark: a throwaway platform (metadata schema, topic namespace,
state directory), ``fennel-dagster engine`` and ``fennel-dagster serve`` as processes of
their own, the bench repo committed and its rows logged through the HTTP ``Client``.

Everything a user would run: the engine owns the datasets' partitions and serves lookups
from their RocksDB state; the query server authenticates the bearer token, plans the query
(cached) and asks the engine for the two lookups.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pandas as pd

from bench.query_repo import DATASETS, ENDPOINTS, FEATURESETS, WEBHOOK
from fennel_dagster.client import Client, LocalClient
from fennel_dagster.metadata import tokens
from fennel_dagster.metadata.db import connect
from fennel_dagster.settings import Settings, get_settings

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def end_process(proc: subprocess.Popen[bytes] | None, timeout: float = 60) -> None:
    """SIGTERM, then SIGKILL, to a process we started (and its own process group)."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def _spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        # a session of its own: stopped as one group (the server's executor processes too)
        return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip


@dataclass
class Ours:
    """The platform under test; ``start()`` brings it up, ``stop()`` removes every trace."""

    partitions: int = 1
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="qbench-")))
    settings: Settings = field(init=False)
    url: str = ""
    token: str = ""
    engine: subprocess.Popen[bytes] | None = None
    server: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        name = f"qb{uuid.uuid4().hex[:10]}"
        self.settings = get_settings().with_(
            pg_schema=name, namespace=name, partitions=self.partitions,
            state_dir=self.workdir / "state", engine_poll_interval_s=0.5,
        )  # fmt: skip

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, **self.settings.as_env(), "PYTHONUNBUFFERED": "1"}

    def start(self) -> None:
        with LocalClient(self.settings) as c:
            c.recover(wait=0)  # creates and migrates the metadata schema
        cli = [sys.executable, "-m", "fennel_dagster.cli.main"]
        self.engine = _spawn([*cli, "engine", "--id", "qbench"], self.env,
                             self.workdir / "engine.log")  # fmt: skip
        self.url, self.server = self.start_server("server")
        with connect(self.settings, self.settings.pg_schema, autocommit=True) as conn:
            self.token = tokens.create(conn, "query-bench", ("admin",))[1]
        deadline = time.monotonic() + 10  # the server hears of it by NOTIFY, within ms
        while httpx.get(f"{self.url}/api/v1/branch/list", timeout=5,
                        headers={"Authorization": f"Bearer {self.token}"}).status_code == 401:  # fmt: skip
            if time.monotonic() > deadline:
                raise RuntimeError("the query server never learnt of the bench token")
            time.sleep(0.02)

    def start_server(self, log: str, workers: int = 1) -> tuple[str, subprocess.Popen[bytes]]:
        """A query server of this platform (``serve --workers N``); its URL once it answers."""
        cli = [sys.executable, "-m", "fennel_dagster.cli.main", "serve", "--executors", "1"]
        port = free_port()
        proc = _spawn([*cli, "--port", str(port), "--workers", str(workers)], self.env,
                      self.workdir / f"{log}.log")  # fmt: skip
        url = f"http://{self.settings.host}:{port}"
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    return url, proc
            if proc.poll() is not None or time.monotonic() > deadline:
                end_process(proc)
                raise RuntimeError(f"query server did not start: {self.log_tail(log)}")
            time.sleep(0.3)

    def log_tail(self, which: str, chars: int = 3000) -> str:
        path = self.workdir / f"{which}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"

    def client(self) -> Client:
        return Client(self.url, self.token, timeout=120)

    def load(self, profiles: pd.DataFrame, stats: pd.DataFrame, timeout: float = 300) -> float:
        """Commit the repo, log the rows, wait until every key is found by both lookups;
        returns the seconds from the first log call until then."""
        with self.client() as c:
            c.commit("query bench", datasets=DATASETS, featuresets=FEATURESETS)
            t0 = time.monotonic()
            for endpoint, df in (("profiles", profiles), ("stats", stats)):
                accepted = c.log(WEBHOOK, endpoint, df).accepted
                if accepted != len(df):
                    raise RuntimeError(f"{endpoint}: {accepted}/{len(df)} rows accepted")
            keys = pd.DataFrame({"uid": profiles.uid})
            pending = dict.fromkeys(ENDPOINTS.values(), True)
            deadline = time.monotonic() + timeout
            while any(pending.values()):
                for ds in [d for d, todo in pending.items() if todo]:
                    with contextlib.suppress(LookupError):  # no live engine route yet
                        pending[ds] = not bool(c.lookup(ds, keys)[1].all())
                if time.monotonic() > deadline:
                    raise RuntimeError(f"rows not all indexed after {timeout}s: {pending}\n"
                                       f"{self.log_tail('engine')}")  # fmt: skip
                if any(pending.values()):
                    time.sleep(0.5)
            return time.monotonic() - t0

    def pids(self) -> list[int]:
        return [p.pid for p in (self.server, self.engine) if p is not None]

    def stop(self) -> None:
        end_process(self.server)
        end_process(self.engine, timeout=120)
        try:
            drop_platform(self.settings)
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)


def drop_platform(s: Settings) -> None:
    """Every branch's physical assets (topics, S3 prefixes), then the metadata schema."""
    with LocalClient(s) as client:
        client.recover()
        for branch in client.list_branches():
            client.delete_branch(branch, even_main=True)
    with connect(s) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {s.pg_schema} CASCADE")
        conn.commit()
