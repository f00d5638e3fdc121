"""The join operator as Fennel documents it, on the MockClient (the engine's operators): each
expected value is what Fennel's own mock answers for the same code and rows (where its
mock breaks on an inner join whose version is out of `within`, its API reference says the
row is dropped: its left join's answer without the null rows). Spark and the engine give
the mock's answers: tests/batch/test_stateful_parity.py, tests/engine/test_engine_parity.py.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from fennel_dagster import dataset, field, inputs, pipeline, source
from fennel_dagster.aggregate import Count, Sum
from fennel_dagster.declare.errors import DeclarationError
from fennel_dagster.mock import MockClient
from fennel_dagster.sources import Webhook
from fennel_dagster.window import Continuous

__owner__ = "joins@example.com"

HOOK = Webhook(name="hook")
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def _h(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


# right versions (uid, city, hour) and left rows (uid, amt, hour): amt names the row
CITIES = [(1, "a", 0), (1, "b", 5), (2, "c", 10), (3, "d", 3)]
ORDERS = [(1, 1, 1), (1, 2, 4), (1, 3, 3), (1, 4, 5), (1, 5, 6), (2, 6, 8), (2, 7, 7),
          (2, 8, 12), (3, 9, 0), (3, 10, 4), (3, 11, 6), (4, 12, 1)]  # fmt: skip


def _joined(how: str, within: tuple[str, str]) -> dict[int, str | None]:
    """amt -> the city its order joined (None: a left join's miss); an inner join's
    dropped rows are absent. The right side is logged first."""

    @source(HOOK.endpoint("Order"), disorder="14d", cdc="append")
    @dataset
    class Order:
        uid: int
        amt: int
        ts: datetime

    @source(HOOK.endpoint("City"), disorder="14d", cdc="upsert")
    @dataset(index=True)
    class City:
        uid: int = field(key=True)
        city: str
        ts: datetime

    @dataset
    class Located:  # a left join: the right's columns are Optional
        uid: int
        amt: int
        city: str | None
        ts: datetime

        @pipeline
        @inputs(Order, City)
        def located(cls, order, city):  # type: ignore[no-untyped-def]
            return order.join(city, how="left", on=["uid"], within=within)

    @dataset
    class Found:  # an inner join: as declared on the right
        uid: int
        amt: int
        city: str
        ts: datetime

        @pipeline
        @inputs(Order, City)
        def found(cls, order, city):  # type: ignore[no-untyped-def]
            return order.join(city, how="inner", on=["uid"], within=within)

    client = MockClient()
    client.commit("joins", datasets=[Order, City, Located if how == "left" else Found])
    client.log("hook", "City", pd.DataFrame(
        [{"uid": u, "city": c, "ts": _h(t)} for u, c, t in CITIES]))  # fmt: skip
    client.log("hook", "Order", pd.DataFrame(
        [{"uid": u, "amt": a, "ts": _h(t)} for u, a, t in ORDERS]))  # fmt: skip
    out = client.get_dataset_df("Located" if how == "left" else "Found")
    # the output keeps each left row's own timestamp
    assert {(a, _h(t)) for _, a, t in ORDERS if a in set(out["amt"])} == {
        (a, pd.Timestamp(t).to_pydatetime()) for a, t in zip(out["amt"], out["ts"], strict=True)
    }
    return {
        int(a): (None if pd.isna(c) else c) for a, c in zip(out["amt"], out["city"], strict=True)
    }


# ("forever", "0s"), the default
DEFAULT = {1: "a", 2: "a", 3: "a", 4: "b", 5: "b", 6: None, 7: None, 8: "c", 9: None,
           10: "d", 11: "d", 12: None}  # fmt: skip
# after=2h: order 2 (4h) and 3 (3h) see b (5h); order 6 (8h) sees c (10h = 8h + 2h, inclusive)
AHEAD = {**DEFAULT, 2: "b", 3: "b", 6: "c"}
# (1h, 2h): ... and a version older than t - 1h is none: order 8 (12h, c at 10h) and 11
# (6h, d at 3h) miss; order 10 (4h) keeps d (3h = 4h - 1h, inclusive)
AROUND = {**AHEAD, 8: None, 11: None}


def _inner(left: dict[int, str | None]) -> dict[int, str | None]:
    return {a: c for a, c in left.items() if c is not None}


@pytest.mark.parametrize(
    ("how", "within", "want"),
    [
        ("left", ("forever", "2h"), AHEAD),
        ("inner", ("forever", "2h"), _inner(AHEAD)),
        ("left", ("1h", "2h"), AROUND),
        ("inner", ("1h", "2h"), _inner(AROUND)),
        # order 2 (4h) sees b (5h, within 1h ahead); order 3 (3h) only a (0h = 3h - 3h)
        (
            "inner",
            ("3h", "1h"),
            {1: "a", 2: "b", 3: "a", 4: "b", 5: "b", 8: "c", 10: "d", 11: "d"},
        ),  # fmt: skip
    ],
)
def test_join_within_before_and_after_as_fennel_answers(
    how: str, within: tuple[str, str], want: dict[int, str | None]
) -> None:
    assert _joined(how, within) == want


def _chain(first: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.Series]:
    """Txn join User (``first``) gives the merchant; that join Merchant (inner) gives the
    category; a Count and a Sum per category downstream."""

    @source(HOOK.endpoint("Txn"), disorder="14d", cdc="append")
    @dataset
    class Txn:
        tid: int
        uid: int
        amount: int
        ts: datetime

    @source(HOOK.endpoint("User"), disorder="14d", cdc="upsert")
    @dataset(index=True)
    class User:
        uid: int = field(key=True)
        mid: int
        ts: datetime

    @source(HOOK.endpoint("Merchant"), disorder="14d", cdc="upsert")
    @dataset(index=True)
    class Merchant:
        mid: int = field(key=True)
        category: str
        ts: datetime

    @dataset
    class Enriched:
        tid: int
        uid: int
        amount: int
        mid: int
        category: str
        ts: datetime

        @pipeline
        @inputs(Txn, User, Merchant)
        def enrich(cls, txn, user, merchant):  # type: ignore[no-untyped-def]
            with_mid = txn.join(user, how=first, on=["uid"])
            if first == "left":
                with_mid = with_mid.dropnull("mid")
            return with_mid.join(merchant, how="inner", on=["mid"])

    @dataset(index=True)
    class PerCategory:
        category: str = field(key=True)
        n: int
        total: int
        ts: datetime

        @pipeline
        @inputs(Enriched)
        def count(cls, enriched):  # type: ignore[no-untyped-def]
            forever = Continuous("forever")
            return enriched.groupby("category").aggregate(
                n=Count(window=forever), total=Sum(of="amount", window=forever)
            )

    client = MockClient()
    client.commit("chain", datasets=[Txn, User, Merchant, Enriched, PerCategory])
    client.log("hook", "User", pd.DataFrame(
        {"uid": [1, 2, 3], "mid": [10, 11, 12], "ts": [_h(0)] * 3}))  # fmt: skip
    client.log("hook", "Merchant", pd.DataFrame(
        {"mid": [10, 11], "category": ["food", "travel"], "ts": [_h(0)] * 2}))  # fmt: skip
    client.log("hook", "Txn", pd.DataFrame(
        {"tid": [100, 101, 102, 103], "uid": [1, 2, 3, 4], "amount": [5, 7, 9, 1],
         "ts": [_h(1), _h(2), _h(3), _h(4)]}))  # fmt: skip
    counts, found = client.lookup(
        "PerCategory", keys=pd.DataFrame({"category": ["food", "travel"]})
    )
    return client.get_dataset_df("Enriched"), counts, found


@pytest.mark.parametrize("first", ["inner", "left"])
def test_a_chain_of_joins_and_a_count_downstream_as_fennel_answers(first: str) -> None:
    """The second join reads a column the first one brought: the user with merchant 12
    (none) and the user with no row drop out, the other two join and are counted."""
    enriched, counts, found = _chain(first)
    got = sorted(zip(enriched["tid"], enriched["mid"], enriched["category"], strict=True))
    assert got == [(100, 10, "food"), (101, 11, "travel")]
    assert found.tolist() == [True, True]
    assert counts["n"].tolist() == [1, 1] and counts["total"].tolist() == [5, 7]


def test_a_pipelines_keyed_output_joined_by_a_pipeline_of_the_same_input() -> None:
    """UserSpend (latest per user, from Txn) is the right side of Txn's own join: each
    transaction meets the version its own row made (right_ts <= t), as in Fennel, whatever
    the order of the datasets in the commit."""

    @source(HOOK.endpoint("Txn"), disorder="14d", cdc="append")
    @dataset
    class Txn:
        tid: int
        uid: int
        amount: int
        ts: datetime

    @dataset(index=True)
    class UserSpend:  # its name sorts after TxnSpend's: the commit lists it later
        uid: int = field(key=True)
        spend: int
        ts: datetime

        @pipeline
        @inputs(Txn)
        def latest(cls, txn):  # type: ignore[no-untyped-def]
            tens = txn.assign("spend", int, lambda df: df["amount"] * 10)
            return tens.drop(["tid", "amount"]).groupby("uid").latest()

    @dataset
    class TxnSpend:
        tid: int
        uid: int
        amount: int
        spend: int | None
        ts: datetime

        @pipeline
        @inputs(Txn, UserSpend)
        def joined(cls, txn, spend):  # type: ignore[no-untyped-def]
            return txn.join(spend, how="left", on=["uid"])

    rows = pd.DataFrame({"tid": [100, 101, 102], "uid": [1, 1, 2], "amount": [5, 7, 9],
                         "ts": [_h(1), _h(4), _h(2)]})  # fmt: skip
    for datasets in ([Txn, TxnSpend, UserSpend], [Txn, UserSpend, TxnSpend]):
        for batches in ([rows], [rows.iloc[[i]] for i in range(len(rows))]):
            client = MockClient()
            client.commit("spend", datasets=datasets)
            for batch in batches:
                client.log("hook", "Txn", batch)
            out = client.get_dataset_df("TxnSpend")
            spend = {int(t): None if pd.isna(v) else int(v)
                     for t, v in zip(out["tid"], out["spend"], strict=True)}  # fmt: skip
            assert spend == {100: 50, 101: 70, 102: 90}


@pytest.mark.parametrize(
    ("within", "says"),
    [(("1h",), "give two durations"), (("1h", "forever"), "upper bound (after) cannot be")],
)
def test_a_join_window_fennel_refuses_is_refused_naming_the_join(
    within: tuple[str, ...], says: str
) -> None:
    @dataset
    class Order:
        uid: int
        ts: datetime

    @dataset(index=True)
    class City:
        uid: int = field(key=True)
        city: str
        ts: datetime

    with pytest.raises(DeclarationError, match=r"Located\.located \(join\).*" + re.escape(says)):

        @dataset
        class Located:
            uid: int
            city: str
            ts: datetime

            @pipeline
            @inputs(Order, City)
            def located(cls, order, city):  # type: ignore[no-untyped-def]
                return order.join(city, how="inner", on=["uid"], within=within)
