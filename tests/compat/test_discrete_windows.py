"""Aggregations over tumbling and hopping windows, answered as Fennel answers them.

A lookup answers the last window closed by then: after a key falls quiet that is an empty
window (a count of 0), not the last window that held its events; a ``lookback`` answers the
window that closed that much earlier. Spark and the engine give the same rows
(``tests/batch/test_stateful_parity.py``, ``tests/engine/test_engine_parity.py``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from fennel_dagster import dataset, field, inputs, meta, pipeline, source
from fennel_dagster.aggregate import Average, Count, Sum
from fennel_dagster.declare import DeclarationError
from fennel_dagster.mock import MockClient
from fennel_dagster.sources import Webhook
from fennel_dagster.window import Hopping, Tumbling

OWNER = "windows@example.com"
T0 = datetime(2024, 1, 1, tzinfo=UTC)


@meta(owner=OWNER)
@source(Webhook(name="hook").endpoint("pay"), disorder="14d", cdc="append")
@dataset
class Pay:
    uid: int
    amount: float
    ts: datetime


@meta(owner=OWNER)
@dataset(index=True)
class Hourly:
    uid: int = field(key=True)
    n: int
    total: float
    mean: float
    ts: datetime

    @pipeline
    @inputs(Pay)
    def hourly(cls, pay):
        return pay.groupby("uid").aggregate(
            n=Count(window=Tumbling("1h")),
            total=Sum(of="amount", window=Tumbling("1h")),
            mean=Average(of="amount", window=Tumbling("1h"), default=-1.0),
        )


@meta(owner=OWNER)
@dataset(index=True)
class Delayed:
    uid: int = field(key=True)
    n: int
    ts: datetime

    @pipeline
    @inputs(Pay)
    def delayed(cls, pay):
        return pay.groupby("uid").aggregate(n=Count(window=Tumbling("1h", lookback="30m")))


def _client(minutes: list[tuple[int, float]]) -> MockClient:
    client = MockClient()
    client.commit(message="windows", datasets=[Pay, Hourly, Delayed])
    rows = [{"uid": uid, "amount": 10.0 * (i + 1), "ts": T0 + timedelta(minutes=m)}
            for i, (m, uid) in enumerate(minutes)]  # fmt: skip
    client.log("hook", "pay", pd.DataFrame(rows))
    return client


def _at(client: MockClient, ds: str, uids: list[int], minute: int) -> pd.DataFrame:
    ts = pd.Series([T0 + timedelta(minutes=minute)] * len(uids))
    df, found = client.lookup(ds, keys=pd.DataFrame({"uid": uids}), timestamps=ts)
    return df.assign(found=found.tolist())


def test_a_quiet_key_answers_the_empty_window_that_closed_last() -> None:
    # uid 1: two events in the first hour; uid 2 one then, and one at 03:30 (the watermark)
    client = _client([(10, 1), (20, 1), (30, 2), (210, 2)])
    assert _at(client, "Hourly", [1], 30)["found"].tolist() == [False]  # nothing closed yet
    first = _at(client, "Hourly", [1, 2], 90)
    assert first["n"].tolist() == [2, 1] and first["total"].tolist() == [30.0, 30.0]
    assert first["mean"].tolist() == [15.0, 30.0]
    quiet = _at(client, "Hourly", [1, 2], 150)  # 02:30: the hour 01:00-02:00 held nothing
    assert quiet["n"].tolist() == [0, 0] and quiet["total"].tolist() == [0.0, 0.0]
    assert quiet["mean"].tolist() == [-1.0, -1.0]  # Average over nothing: its default
    # one empty window a quiet spell: uid 2's 03:00 window is still open at the watermark
    assert _at(client, "Hourly", [2], 24 * 60)["n"].tolist() == [0]
    rows = client.get_dataset_df("Hourly")
    assert sorted(rows[rows.uid == 1].n.tolist()) == [0, 2]


def test_a_lookback_answers_the_window_that_closed_that_much_earlier() -> None:
    client = _client([(10, 1), (20, 1), (130, 1)])  # the watermark: 02:10
    assert _at(client, "Delayed", [1], 75)["found"].tolist() == [False]  # 01:15: not yet
    assert _at(client, "Delayed", [1], 95)["n"].tolist() == [2]  # 01:35: 00:00-01:00
    # 02:00-03:00 holds the 02:10 event; 01:00-02:00 (empty) is out at 02:30, not before
    assert _at(client, "Delayed", [1], 24 * 60)["n"].tolist() == [2]


def test_aggregations_over_different_discrete_windows_are_refused_by_name() -> None:
    with pytest.raises(DeclarationError, match=r"different tumbling/hopping.*hopping.*tumbling"):

        @meta(owner=OWNER)
        @dataset(index=True)
        class Mixed:
            uid: int = field(key=True)
            n: int
            total: float
            ts: datetime

            @pipeline
            @inputs(Pay)
            def mixed(cls, pay):
                return pay.groupby("uid").aggregate(
                    n=Count(window=Tumbling("1h")),
                    total=Sum(of="amount", window=Hopping("1h", "30m")),
                )


@meta(owner=OWNER)
@dataset(index=True)
class SoFar:
    uid: int = field(key=True)
    n: int
    total: float
    ts: datetime

    @pipeline
    @inputs(Pay)
    def so_far(cls, pay):
        return pay.groupby("uid").aggregate(
            n=Count(window=Hopping("forever", "1h")),
            total=Sum(of="amount", window=Hopping("forever", "1h")),
        )


def test_a_forever_hopping_window_answers_everything_before_the_last_strides_end() -> None:
    client = MockClient()
    client.commit("v1", datasets=[Pay, SoFar])
    minutes = [0, 10, 130, 300]  # the last one closes the 03:00 stride
    client.log("hook", "pay", pd.DataFrame({
        "uid": [1] * 4, "amount": [1.0, 2.0, 4.0, 8.0],
        "ts": [T0 + timedelta(minutes=m) for m in minutes],
    }))  # fmt: skip
    rows = client.get_dataset_df("SoFar")
    assert rows["n"].tolist() == [2, 3]  # at 01:00 and at 03:00 (no events: no 02:00 row)
    assert rows["total"].tolist() == [3.0, 7.0]
    at = pd.Series([T0 + timedelta(hours=2), T0 + timedelta(hours=4)])
    found, _ = client.lookup("SoFar", keys=pd.DataFrame({"uid": [1, 1]}), timestamps=at)
    assert found["n"].tolist() == [2, 3]
    with pytest.raises(DeclarationError, match="Hopping\\('forever', ...\\) as a key"):

        @meta(owner=OWNER)
        @dataset(index=True)
        class Keyed:
            uid: int = field(key=True)
            n: int
            ts: datetime

            @pipeline
            @inputs(Pay)
            def keyed(cls, pay):
                return pay.groupby("uid", window=Hopping("forever", "1h")).aggregate(
                    n=Count(window=Hopping("forever", "1h"))
                )
