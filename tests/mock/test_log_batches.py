"""``log(..., batch_size=)`` (Fennel's parameter): rows reach the pipelines that many at a time,
and the answers do not depend on it; a batch size that is not a positive whole number is
refused naming it."""

from __future__ import annotations

from datetime import datetime

import pandas as pd
import pytest

from fennel_dagster import dataset, field, inputs, meta, pipeline, source
from fennel_dagster.aggregate import Count, Sum
from fennel_dagster.mock import MockClient
from fennel_dagster.mock.client import MockError
from fennel_dagster.sources import Webhook
from fennel_dagster.window import Continuous


@meta(owner="t@example.com")
@source(Webhook(name="hook").endpoint("ev"), disorder="14d", cdc="append")
@dataset
class Ev:
    uid: int
    amount: int
    ts: datetime


@meta(owner="t@example.com")
@dataset(index=True)
class Totals:
    uid: int = field(key=True)
    n: int
    total: int
    ts: datetime

    @pipeline
    @inputs(Ev)
    def totals(cls, ev):  # type: ignore[no-untyped-def]
        return ev.groupby("uid").aggregate(
            n=Count(window=Continuous("forever")),
            total=Sum(of="amount", window=Continuous("forever")),
        )


ROWS = pd.DataFrame({
    "uid": [i % 3 for i in range(10)],
    "amount": list(range(10)),
    "ts": [pd.Timestamp("2026-01-01", tz="UTC") + pd.Timedelta(minutes=i) for i in range(10)],
})  # fmt: skip


def _answer(batch_size: int) -> tuple[int, list[int], list[int]]:
    client = MockClient()
    client.commit("c", datasets=[Ev, Totals])
    accepted = client.log("hook", "ev", ROWS, batch_size=batch_size).accepted
    found, _ = client.lookup(Totals, keys=pd.DataFrame({"uid": [0, 1, 2]}))
    return accepted, found["n"].tolist(), found["total"].tolist()


def test_the_answer_does_not_depend_on_the_batch_size() -> None:
    expected = (10, [4, 3, 3], [18, 12, 15])
    for size in (1, 3, 1000):
        assert _answer(size) == expected


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_a_batch_size_that_is_not_a_positive_whole_number_is_refused(bad: object) -> None:
    client = MockClient()
    client.commit("c", datasets=[Ev, Totals])
    with pytest.raises(MockError, match="batch_size"):
        client.log("hook", "ev", ROWS, batch_size=bad)  # type: ignore[arg-type]
