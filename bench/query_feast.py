"""Feast's side of the query benchmark: a feature repo in a throwaway directory, the same rows
as Parquet files, ``feast apply``, ``feast materialize-incremental``, then ``feast serve``
(the Python feature server, ``POST /get-online-features``).

Feast runs from its own venv (``bench/feast_env.sh`` makes it; this module only writes files
and runs Feast's CLI there). Two online stores, both on this machine:

- **sqlite** (Feast's default, ``online_store: {type: sqlite}``): a file next to the repo,
  read in the serving process itself, no network hop;
- **postgres** (``feast[postgres]``): the stack's PostgreSQL, in a schema of its own, over
  loopback TCP.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pandas as pd

from fennel_dagster.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
# the Feast venv of the checkout the bench was started from (see query_bench --code)
VENV = Path(os.environ.get("QBENCH_FEAST_VENV") or ROOT / "bench" / ".work" / "feast-venv")
FEAST = VENV / "bin" / "feast"
PYTHON = VENV / "bin" / "python"
FEATURES = ["user_profile:country", "user_stats:spend"]

REPO_PY = """
from datetime import timedelta

from feast import Entity, FeatureView, Field, FileSource, ValueType
from feast.types import Float64, String

user = Entity(name="user", join_keys=["uid"], value_type=ValueType.INT64)

user_profile = FeatureView(
    name="user_profile",
    entities=[user],
    ttl=timedelta(days=1),
    schema=[Field(name="country", dtype=String)],
    source=FileSource(name="profiles", path={profiles!r}, timestamp_field="ts"),
    online=True,
)

user_stats = FeatureView(
    name="user_stats",
    entities=[user],
    ttl=timedelta(days=1),
    schema=[Field(name="spend", dtype=Float64)],
    source=FileSource(name="stats", path={stats!r}, timestamp_field="ts"),
    online=True,
)
"""


def ensure_venv() -> dict[str, str]:
    """The Feast venv (made by ``bench/feast_env.sh`` when missing) with the ``postgres``
    extra of the same Feast release; returns the versions in it."""
    if not PYTHON.exists():
        subprocess.run(["bash", str(ROOT / "bench" / "feast_env.sh")], cwd=ROOT, check=True)
    probe = "import feast, psycopg, psycopg_pool"
    if subprocess.run([str(PYTHON), "-c", probe], capture_output=True).returncode != 0:
        version = _versions()["feast"]
        subprocess.run([str(PYTHON), "-m", "pip", "install", "--quiet",
                        f"feast[postgres]=={version}"], check=True)  # fmt: skip
    return _versions()


def _versions() -> dict[str, str]:
    code = (
        "import json, sqlite3, sys\n"
        "from importlib.metadata import version as v\n"
        "out = {'python': sys.version.split()[0], 'sqlite': sqlite3.sqlite_version}\n"
        "for p in ('feast', 'fastapi', 'uvicorn', 'gunicorn', 'psycopg'):\n"
        "    try: out[p] = v(p)\n"
        "    except Exception: pass\n"
        "print(json.dumps(out))\n"
    )
    res = subprocess.run([str(PYTHON), "-c", code], capture_output=True, text=True, check=True)
    return dict(json.loads(res.stdout))


def write_data(root: Path, profiles: pd.DataFrame, stats: pd.DataFrame) -> tuple[Path, Path]:
    """The rows our webhooks received, as Feast's offline source reads them."""
    root.mkdir(parents=True, exist_ok=True)
    paths = root / "profiles.parquet", root / "stats.parquet"
    for df, path in zip((profiles, stats), paths, strict=True):
        df.to_parquet(path, index=False)
    return paths


def online_store(kind: str, s: Settings, schema: str) -> dict[str, Any]:
    if kind == "sqlite":
        return {"type": "sqlite", "path": "data/online.db"}
    if kind == "postgres":
        return {"type": "postgres", "host": s.postgres_host, "port": s.pg_port,
                "database": s.pg_db, "db_schema": schema, "user": s.pg_user,
                "password": s.pg_password, "sslmode": "disable"}  # fmt: skip
    raise ValueError(f"unknown online store {kind!r}")


@dataclass
class FeastRepo:
    """One Feast repo over the bench rows, with one online store."""

    path: Path
    kind: str  # "sqlite" | "postgres"
    settings: Settings
    pg_schema: str = ""

    def create(self, profiles: Path, stats: Path) -> float:
        """Write the repo, ``feast apply``, ``feast materialize-incremental``; seconds taken."""
        shutil.rmtree(self.path, ignore_errors=True)
        (self.path / "data").mkdir(parents=True)
        config = {
            "project": "query_bench",
            "provider": "local",
            "registry": "data/registry.db",
            "online_store": online_store(self.kind, self.settings, self.pg_schema),
            "offline_store": {"type": "file"},
            "entity_key_serialization_version": 3,
        }
        # JSON is YAML: no YAML writer needed in this venv
        (self.path / "feature_store.yaml").write_text(json.dumps(config, indent=2) + "\n")
        (self.path / "repo.py").write_text(
            REPO_PY.format(profiles=str(profiles.resolve()), stats=str(stats.resolve()))
        )
        if self.kind == "postgres":
            self._psql(f"CREATE SCHEMA IF NOT EXISTS {self.pg_schema}")
        t0 = time.monotonic()
        self._feast("apply")
        end = (pd.Timestamp.now(tz="UTC") + pd.Timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S")
        self._feast("materialize-incremental", end)
        return time.monotonic() - t0

    def _feast(self, *args: str) -> None:
        env = {**os.environ, "FEAST_USAGE": "False", "TZ": "UTC"}
        res = subprocess.run([str(FEAST), "-c", str(self.path), *args], env=env,
                             capture_output=True, text=True, timeout=600)  # fmt: skip
        if res.returncode != 0:
            raise RuntimeError(f"feast {' '.join(args)} failed:\n{res.stderr[-3000:]}")

    def _psql(self, sql: str) -> None:
        from fennel_dagster.metadata.db import connect

        with connect(self.settings, autocommit=True) as conn:
            conn.execute(sql)

    def drop(self) -> None:
        if self.kind == "postgres" and self.pg_schema:
            self._psql(f"DROP SCHEMA IF EXISTS {self.pg_schema} CASCADE")
        shutil.rmtree(self.path, ignore_errors=True)


@dataclass
class FeastServer:
    """``feast serve`` (gunicorn + uvicorn workers) on ``port``."""

    repo: FeastRepo
    port: int
    workers: int = 1
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {**os.environ, "FEAST_USAGE": "False", "TZ": "UTC"}
        log = (self.repo.path / f"serve-{self.workers}.log").open("ab")
        argv = [str(FEAST), "-c", str(self.repo.path), "serve", "--host", "127.0.0.1",
                "--port", str(self.port), "--workers", str(self.workers), "--no-access-log"]  # fmt: skip
        self.proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = (self.repo.path / f"serve-{self.workers}.log").read_text()[-3000:]
                raise RuntimeError(f"feast serve did not start:\n{tail}")
            time.sleep(0.3)
        # every worker up: each answers once before the clock starts
        for _ in range(4 * self.workers):
            self.features([0])

    def features(self, uids: list[int]) -> pd.DataFrame:
        """The two features for ``uids`` as Feast's server answers them."""
        body = {"features": FEATURES, "entities": {"uid": uids}}
        r = httpx.post(f"{self.url}/get-online-features", json=body, timeout=30)
        r.raise_for_status()
        reply = r.json()
        names = reply["metadata"]["feature_names"]
        cols = {n: res["values"] for n, res in zip(names, reply["results"], strict=True)}
        status = {n: res["statuses"] for n, res in zip(names, reply["results"], strict=True)}
        df = pd.DataFrame(cols)
        df["found"] = [all(status[n][i] == "PRESENT" for n in names) for i in range(len(df))]
        return df

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
