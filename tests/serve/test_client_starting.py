"""The HTTP client after a commit whose partitions are still starting: a lookup meeting 503
is retried until they are served (bounded); after a commit answered ready, only while it
settles (its replaced runners hand over), later a 503 fails at once (an engine lost). A query server stand-in over httpx's transport."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx
import orjson
import pandas as pd
import pytest

from fennel_dagster import dataset, field, meta, source
from fennel_dagster.client import Client
from fennel_dagster.engine.lookup_client import EngineUnavailable
from fennel_dagster.sources import Webhook
from fennel_dagster.wire import codec, spec


@meta(owner="starting@example.com")
@source(Webhook(name="starting_hook").endpoint("rows"), disorder="1d", cdc="upsert")
@dataset(index=True)
class Row:
    uid: int = field(key=True)
    v: int
    ts: datetime


class Stand:
    """Answers commits with ``starting``, then ``unavailable`` 503s, then the rows."""

    def __init__(self, starting: list[str], unavailable: int) -> None:
        self.starting, self.unavailable = starting, unavailable
        self.lookups = 0
        self.commit_params: dict[str, str] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/commit":
            self.commit_params = dict(request.url.params)
            return self._json({"commit_id": 1, "ready": not self.starting,
                               "starting": self.starting})  # fmt: skip
        self.lookups += 1
        if self.lookups <= self.unavailable:
            return self._json({"error": "no live engine serves partition 1 of j"}, 503)
        types = {"uid": spec.IntType(), "v": spec.IntType(), "ts": spec.TimestampType()}
        return self._json({"data": {"uid": [1], "v": [7], "ts": ["2026-01-01T00:00:00+00:00"]},
                           "found": [True],
                           "types": {k: codec.to_jsonable(t) for k, t in types.items()}})  # fmt: skip

    @staticmethod
    def _json(body: dict[str, Any], status: int = 200) -> httpx.Response:
        return httpx.Response(status, content=orjson.dumps(body))


def _client(stand: Stand) -> Client:
    c = Client("http://stand", "t")
    c.http = httpx.Client(base_url="http://stand", transport=httpx.MockTransport(stand))
    return c


def test_a_lookup_is_retried_while_the_commits_partitions_start() -> None:
    stand = Stand(starting=["j p1"], unavailable=3)
    c = _client(stand)
    answer = c.commit("rows", datasets=[Row], ready_timeout=5)
    assert stand.commit_params["ready_timeout"] == "5"
    assert answer.json()["ready"] is False
    c.STARTING_RETRY_S = 10.0
    try:
        df, found = c.lookup("Row", pd.DataFrame({"uid": [1]}))
    except EngineUnavailable:
        pytest.fail("a 503 while the commit's partitions start must be retried")
    assert stand.lookups == 4 and found.tolist() == [True]


def test_after_a_ready_commit_503s_are_retried_only_while_it_settles() -> None:
    stand = Stand(starting=[], unavailable=2)
    c = _client(stand)
    answer = c.commit("rows", datasets=[Row])
    assert answer.json()["ready"] is True and answer.status_code == 200 and answer.json()["ready"]
    assert c.lookup("Row", pd.DataFrame({"uid": [1]}))[1].tolist() == [True]
    assert stand.lookups == 3  # two 503s right after the commit, retried
    c.SETTLE_RETRY_S = 0.0  # past the settling time: an engine lost fails at once
    stand.lookups, stand.unavailable = 0, 1
    c.commit("rows", datasets=[Row])
    with pytest.raises(EngineUnavailable, match="partition 1"):
        c.lookup("Row", pd.DataFrame({"uid": [1]}))
    assert stand.lookups == 1


def test_the_retry_is_bounded() -> None:
    stand = Stand(starting=["j p1"], unavailable=10_000)
    c = _client(stand)
    c.STARTING_RETRY_S = 1.0
    c.commit("rows", datasets=[Row])
    with pytest.raises(EngineUnavailable):
        c.lookup("Row", pd.DataFrame({"uid": [1]}))
    assert 2 <= stand.lookups <= 10
