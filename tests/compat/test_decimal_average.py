"""An Average of a Decimal column is the decimal mean as a float, as Fennel answers
(``test_date_type``: the mean of 1400.10 and 90.10 is 745.1, where the mean of the two
floats is 745.0999999999999): on the tiles' road (continuous windows) and the raw events'
road (tumbling windows) alike."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal as PyDecimal

import pandas as pd

from fennel_dagster import dataset, field, inputs, pipeline
from fennel_dagster.aggregate import Average, Sum
from fennel_dagster.declare import commit_spec
from fennel_dagster.dtypes import Continuous, Decimal, Tumbling, Window
from fennel_dagster.mock import MockClient
from fennel_dagster.ops.aggregate.values import aggregate_values
from fennel_dagster.sources import Webhook, source

__owner__ = "compat@example.com"

HOOK = Webhook(name="dec_avg_hook")
T0 = datetime(2024, 1, 1, tzinfo=UTC)


@source(HOOK.endpoint("Debits"), disorder="14d", cdc="append")
@dataset
class Debits:
    uid: int
    amount: Decimal[2]
    plain: float
    ts: datetime


@dataset(index=True)
class DebitStats:
    uid: int = field(key=True)
    avg: float
    plain_avg: float
    total: Decimal[2]
    ts: datetime

    @pipeline
    @inputs(Debits)
    def p(cls, d):  # type: ignore[no-untyped-def]
        return d.groupby("uid").aggregate(
            avg=Average(of="amount", window=Continuous("forever")),
            plain_avg=Average(of="plain", window=Continuous("forever")),
            total=Sum(of="amount", window=Continuous("forever")),
        )


@dataset(index=True)
class DebitDays:
    uid: int = field(key=True)
    window: Window = field(key=True)
    avg: float
    ts: datetime

    @pipeline
    @inputs(Debits)
    def p(cls, d):  # type: ignore[no-untyped-def]
        return d.groupby("uid", window=Tumbling("1d")).aggregate(
            avg=Average(of="amount"), emit="final"
        )


def test_the_average_of_decimals_is_the_decimal_mean() -> None:
    specs = {d.name: d for d in commit_spec("d", [Debits, DebitStats]).datasets}
    node = specs["DebitStats"].pipelines[0].nodes[-1]
    scales = {a.into: a.decimal_scale for a in node.aggs}  # type: ignore[union-attr]
    assert scales == {"avg": 2, "plain_avg": None, "total": None}
    client = MockClient()
    client.commit("d", datasets=[Debits, DebitStats])
    client.log("dec_avg_hook", "Debits", pd.DataFrame({
        "uid": [2, 2, 3, 3, 3], "amount": [1400.10, 90.10, 0.1, 0.2, 0.3],
        "plain": [1400.10, 90.10, 0.1, 0.2, 0.3], "ts": [T0] * 5}))  # fmt: skip
    df, _ = client.lookup("DebitStats", keys=pd.DataFrame({"uid": [2, 3]}))
    assert df["avg"].tolist() == [745.1, 0.2]
    assert df["plain_avg"].tolist()[0] == 745.0999999999999  # the floats' mean
    assert df["total"].tolist() == [PyDecimal("1490.20"), PyDecimal("0.60")]


def test_the_raw_events_road_takes_the_decimal_mean_too() -> None:
    specs = {d.name: d for d in commit_spec("d", [Debits, DebitDays]).datasets}
    (node,) = [n for n in specs["DebitDays"].pipelines[0].nodes if hasattr(n, "aggs")]
    (agg,) = node.aggs  # type: ignore[union-attr]
    assert agg.decimal_scale == 2
    assert aggregate_values(agg, [1400.10, 90.10], [0, 0]) == 745.1
    assert aggregate_values(agg, [0.1, 0.2, 0.3, None], [0] * 4) == 0.2
    client = MockClient()
    client.commit("d", datasets=[Debits, DebitDays])
    client.log("dec_avg_hook", "Debits", pd.DataFrame({
        "uid": [2, 2, 2], "amount": [1400.10, 90.10, 1.0], "plain": [0.0] * 3,
        "ts": [T0, T0, T0 + timedelta(days=2)]}))  # fmt: skip
    assert client.get_dataset_df("DebitDays")["avg"].tolist() == [745.1]
