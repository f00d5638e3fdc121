"""tools/fennel_compat.py --platform on a Fennel-style integration test of ours: the checker
starts an engine and a query server on the real stack, the ``@mock`` test gets the HTTP
client on a fresh branch (``is_integration_client()``), logs through a webhook, waits with
``client.sleep()`` and finds every row counted; afterwards both processes are stopped and
the platform is dropped."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from fennel_dagster.metadata.db import connect
from fennel_dagster.settings import Settings
from tests.compat.test_checker import CHECKER, git

pytestmark = pytest.mark.services

INTEGRATION_TEST = """\
from datetime import datetime, timezone

import pandas as pd
import pytest

from fennel.connectors import Webhook, source
from fennel.datasets import Count, Dataset, dataset, field, pipeline
from fennel.dtypes import Continuous
from fennel.lib import inputs
from fennel.testing import mock

__owner__ = "it@example.com"
webhook = Webhook(name="fennel_webhook")


@source(webhook.endpoint("Click"), disorder="14d", cdc="append")
@dataset
class Click:
    uid: int
    page: str
    ts: datetime


@dataset(index=True)
class ClickCount:
    uid: int = field(key=True)
    clicks: int
    ts: datetime

    @pipeline
    @inputs(Click)
    def count(cls, click: Dataset):
        return click.groupby("uid").aggregate(clicks=Count(window=Continuous("forever")))


@pytest.mark.integration
@mock
def test_every_logged_click_is_counted(client):
    assert client.is_integration_client(), "FENNEL_TEST_MODE=platform gives the deployment"
    assert client.branch() != "main"  # a fresh branch of the test's own
    client.commit(message="clicks", datasets=[Click, ClickCount])
    now = datetime.now(timezone.utc)
    n = 2000
    df = pd.DataFrame({"uid": [i % 5 for i in range(n)], "page": ["home"] * n, "ts": [now] * n})
    response = client.log("fennel_webhook", "Click", df)
    assert response.status_code == 200
    client.sleep()
    keys = pd.DataFrame({"uid": [0, 1, 2, 3, 4]})
    counts, found = client.lookup("ClickCount", keys=keys)
    assert found.tolist() == [True] * 5
    assert counts["clicks"].tolist() == [n // 5] * 5


def test_not_marked_is_not_run(client=None):
    raise AssertionError("-m integration runs only the marked tests")
"""


def test_platform_mode_runs_a_fennel_style_integration_test(
    live_stack: Settings, tmp_path: Path
) -> None:
    repo = tmp_path / "client"
    tests = repo / "fennel" / "client_tests"
    tests.mkdir(parents=True)
    (tests / "test_clicks.py").write_text(INTEGRATION_TEST)
    (repo / "pytest.ini").write_text("[pytest]\nmarkers =\n    integration: against a server\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "tests")
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(CHECKER), "--clone", str(repo), "--out", str(out),
         "--python", sys.executable, "--examples", "fennel/client_tests",
         "--marker", "integration", "--platform", "--timeout", "400"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    log = (out / "logs" / "fennel__client_tests__test_clicks.py.log").read_text()
    assert done.returncode == 0, done.stderr
    assert "1/1 declared tests passed" in done.stdout, log[-3000:]
    with (out / "tests.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["test"], r["outcome"]) for r in rows] == [
        ("test_every_logged_click_is_counted", "passed")
    ]
    # the engine and the server ran, and are gone with their platform
    assert "serving lookups" in (out / "engine.log").read_text()
    with connect(live_stack) as conn:
        schemas = [r[0] for r in conn.execute(
            "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'compat%'"
        ).fetchall()]  # fmt: skip
    assert not [s for s in schemas if s in (out / "engine.log").read_text()]
