"""The timestamp a lookup of a continuous-window aggregate answers: when the key's row took
the value it has at the lookup's time (Fennel's answer), not the lookup's time. An event
entering a window changes the row at its event time; leaving a window of duration ``d``
(``[t - d, t]``), at ``e + d + 1 µs`` (Fennel's mock, working in seconds, says ``+ 1 s``).
A key not found answers NaT."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd

from fennel_dagster import dataset, field, inputs, pipeline
from fennel_dagster.aggregate import Count, Sum
from fennel_dagster.dtypes import Continuous
from fennel_dagster.mock import MockClient
from fennel_dagster.sources import Webhook, source

__owner__ = "compat@example.com"

HOOK = Webhook(name="agg_time_hook")
T0 = datetime(2024, 1, 1, tzinfo=UTC)
HOUR, DAY, US = timedelta(hours=1), timedelta(days=1), timedelta(microseconds=1)


@source(HOOK.endpoint("Clicks"), disorder="14d", cdc="append")
@dataset
class Clicks:
    uid: int
    n: int
    ts: datetime


@dataset(index=True)
class Ever:
    uid: int = field(key=True)
    count: int
    ts: datetime

    @pipeline
    @inputs(Clicks)
    def p(cls, c):  # type: ignore[no-untyped-def]
        return c.groupby("uid").aggregate(count=Count(window=Continuous("forever")))


@dataset(index=True)
class Daily:
    uid: int = field(key=True)
    day: int
    week: int
    ts: datetime

    @pipeline
    @inputs(Clicks)
    def p(cls, c):  # type: ignore[no-untyped-def]
        return c.groupby("uid").aggregate(
            day=Sum(of="n", window=Continuous("1d")), week=Sum(of="n", window=Continuous("7d"))
        )


def _client() -> MockClient:
    client = MockClient()
    client.commit("t", datasets=[Clicks, Ever, Daily])
    client.log("agg_time_hook", "Clicks", pd.DataFrame({
        "uid": [1, 1, 2], "n": [1, 2, 3], "ts": [T0, T0 + HOUR, T0]}))  # fmt: skip
    return client


def test_a_forever_aggregate_answers_the_time_of_its_newest_event() -> None:
    # Fennel: {'count': [2, 1, None], 'ts': [T0 + 1h, T0, NaT]}; as of T0 + 30m: [T0, T0]
    client = _client()
    df, found = client.lookup("Ever", keys=pd.DataFrame({"uid": [1, 2, 3]}))
    assert found.tolist() == [True, True, False]
    assert df["count"].tolist()[:2] == [2, 1]
    assert df["ts"].tolist()[:2] == [T0 + HOUR, T0] and pd.isna(df["ts"].iloc[2])
    df, _ = client.lookup("Ever", keys=pd.DataFrame({"uid": [1, 2]}),
                          timestamps=pd.Series([T0 + HOUR / 2, T0 + 3 * DAY]))  # fmt: skip
    assert df["ts"].tolist() == [T0, T0]
    # two lookups of one row answer one time (Fennel's test_complex_struct compares them)
    again, _ = client.lookup("Ever", keys=pd.DataFrame({"uid": [1, 2, 3]}))
    assert again["ts"].equals(client.lookup("Ever", keys=pd.DataFrame({"uid": [1, 2, 3]}))[0]["ts"])


def test_a_windowed_aggregate_changes_when_an_event_leaves_its_window() -> None:
    client = _client()
    at = [T0 + HOUR / 2, T0 + DAY, T0 + DAY + 2 * HOUR, T0 + 3 * DAY, T0 + 30 * DAY]
    df, found = client.lookup("Daily", keys=pd.DataFrame({"uid": [1] * 5}),
                              timestamps=pd.Series(at))  # fmt: skip
    assert found.tolist() == [True] * 5
    assert df["day"].tolist() == [1, 3, 0, 0, 0]
    assert df["week"].tolist() == [1, 3, 3, 3, 0]
    assert df["ts"].tolist() == [
        T0,  # the first event
        T0 + HOUR,  # the second event (the first is still in the day: both ends count)
        T0 + DAY + HOUR + US,  # the second left the day
        T0 + DAY + HOUR + US,
        T0 + 7 * DAY + HOUR + US,  # the second left the week
    ]
