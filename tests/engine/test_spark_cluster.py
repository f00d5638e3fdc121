"""Scale out by configuration: the same replay runs on a standalone Spark cluster (a master
and a worker started from PySpark's own jars) when FENNEL_SPARK_MASTER names it; executors
read and write the offline tables on S3, nothing is local to the driver."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fennel_dagster.offline.table import OfflineTable
from fennel_dagster.ops.rows import to_records
from fennel_dagster.settings import Settings
from fennel_dagster.wire import plan
from tests.engine import repo
from tests.engine.expected import mock_rows, mock_run
from tests.engine.harness import txn_with_history, wait_for
from tests.engine.test_replay import COLS, _multiset

pytestmark = pytest.mark.services


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    """A standalone master and one worker (1 core, 1 GiB) on the loopback interface."""
    port, ui = _free_port(), _free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "SPARK_WORKER_DIR": str(tmp_path / "work"), "SPARK_LOG_DIR": str(tmp_path)}  # fmt: skip
    master_url = f"spark://127.0.0.1:{port}"
    master = subprocess.Popen(
        [str(_spark_class()), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
         "--port", str(port), "--webui-port", str(ui)],
        env=env, stdout=open(tmp_path / "master.log", "wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    worker = subprocess.Popen(
        [str(_spark_class()), "org.apache.spark.deploy.worker.Worker", master_url,
         "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
         "--webui-port", str(_free_port())],
        env=env, stdout=open(tmp_path / "worker.log", "wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for(lambda: b"Successfully registered with master" in
                 (tmp_path / "worker.log").read_bytes(), 90, "the Spark worker")  # fmt: skip
        yield master_url
    finally:
        for proc in (worker, master):
            proc.terminate()
        for proc in (worker, master):  # a JVM under load may take longer than 30 s to stop
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)


def test_a_replay_runs_on_a_standalone_cluster_by_setting_the_master(
    engine_settings: Settings, cluster: str, tmp_path: Path
) -> None:
    s = engine_settings.with_(offline_flush_s=0.2)
    ev = repo.events(300, keys=6, seed=13)
    datasets, jobs = txn_with_history(s, ev)
    env = {**os.environ, **s.as_env(), "FENNEL_SPARK_MASTER": cluster}
    out = subprocess.run(
        [sys.executable, "-m", "fennel_dagster.cli.main", "backfill", "Spend"],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-3000:])
    assert f"Spend: {len(ev)} rows recomputed" in out.stdout
    worker_log = (tmp_path / "worker.log").read_text(errors="replace")
    assert "Asked to launch executor" in worker_log  # the cluster ran it, not a local driver
    spend = jobs["offline:Spend"].spec
    assert isinstance(spend, plan.OfflineJobSpec)
    got: Any = OfflineTable(s, spend.table).read().to_pandas()
    want = _multiset(mock_rows(mock_run(datasets, ev), "Spend"))
    assert _multiset(to_records(got[COLS])) == want
