"""Offline queries over the query server's HTTP API (Fennel's ``/api/v1/query_offline`` with
status and cancel): a request is recorded, the deployment's runner (here the function a
Dagster run calls) carries it out on Spark, and ``Client.query_offline(wait=True)`` returns
the features as of each row, equal to the mock's."""

from __future__ import annotations

import threading
from typing import Any

import pandas as pd
import pytest

from fennel_dagster.batch.offline_runner import execute
from fennel_dagster.client import Client
from fennel_dagster.client.http import ServerError
from fennel_dagster.metadata import offline_queries
from fennel_dagster.metadata.db import connect
from fennel_dagster.settings import Settings
from tests.engine.test_example_end_to_end import _cells, _spine, _wait_offline_tables
from tests.serve.conftest import Serving

pytestmark = pytest.mark.services
INPUTS = ["UserFeatures.uid"]


def _runner(s: Settings, spark: Any, stop: threading.Event) -> threading.Thread:
    """What the deployment's sensor and Dagster runs do: run every pending request."""

    def loop() -> None:
        while not stop.wait(0.3):
            with connect(s, s.pg_schema, autocommit=True) as conn:
                pending = offline_queries.pending_after(conn, 0)
            for rid in pending:
                execute(spark, s, rid, f"test-runner-{rid}")

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    return t


def test_query_offline_over_http_equals_the_mock(loaded, serving: Serving, spark: Any) -> None:  # type: ignore[no-untyped-def]
    _, mock, ev, _ = loaded
    s = serving.settings
    client = Client(serving.url, serving.token("offline", ("query",)))
    _wait_offline_tables(s, {"User": len(ev.users), "EnrichedTransaction": len(ev.transactions)})
    spine = _spine(ev, rows=30)[[*INPUTS, "ts"]]
    stop = threading.Event()
    runner = _runner(s, spark, stop)
    try:
        got = client.query_offline(INPUTS, ["UserFeatures"], "ts", input_dataframe=spine,
                                   wait=True, timeout=300)  # fmt: skip
    finally:
        stop.set()
        runner.join(60)
    assert isinstance(got, pd.DataFrame)
    want = mock.query_offline(INPUTS, ["UserFeatures"], spine, "ts")
    assert list(got.columns) == list(want.columns)
    for c in want.columns:
        assert _cells(got[c]) == _cells(want[c]), c


def test_offline_query_requests_status_cancel_and_bad_input(loaded, serving: Serving) -> None:  # type: ignore[no-untyped-def]
    _, _, ev, _ = loaded
    client = Client(serving.url, serving.token("offline-status", ("query",)))
    spine = _spine(ev, rows=5)[[*INPUTS, "ts"]]
    st = client.query_offline(INPUTS, ["UserFeatures.spend_7d"], "ts", input_dataframe=spine)
    assert isinstance(st, dict) and st["state"] == "pending" and st["branch"] == "main"
    assert client.track_offline_query(st["request_id"])["request"]["outputs"] == [
        "UserFeatures.spend_7d"
    ]
    gone = client.cancel_offline_query(st["request_id"])
    assert gone["state"] == "cancelled" and gone["cancel_requested"]

    with pytest.raises(ServerError, match="unknown feature UserFeatures.nope") as e:
        client.query_offline(INPUTS, ["UserFeatures.nope"], "ts", input_dataframe=spine)
    assert e.value.status == 400
    with pytest.raises(ServerError, match="data: no timestamp column 'when'"):
        client.query_offline(INPUTS, ["UserFeatures.spend_7d"], "when", input_dataframe=spine)
    with pytest.raises(ServerError, match="exactly one input") as e:
        client.query_offline(INPUTS, ["UserFeatures.spend_7d"], "ts")
    with pytest.raises(ServerError, match="no offline query 987654") as e:
        client.track_offline_query(987654)
    assert e.value.status == 404
