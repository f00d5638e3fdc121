"""The lookup endpoint's answer (JSON records, no DataFrame) equals the DataFrame answer every
other reader uses, field for field: for every type, found or not, before a key's first row,
after a delete, for any subset of fields, for an index and for an aggregate's state (every
aggregate kind; the frameless road where it types the values, frames where it does not)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import random
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fennel_dagster import dataset, field, inputs, meta, pipeline
from fennel_dagster.aggregate import (
    Avg,
    Count,
    Distinct,
    ExpDecaySum,
    LastK,
    Max,
    Min,
    Quantile,
    Stddev,
    Sum,
)
from fennel_dagster.mock import MockClient
from fennel_dagster.ops.expr import astype
from fennel_dagster.ops.keys import micros_of
from fennel_dagster.ops.rows import json_column, to_records
from fennel_dagster.query import lookup
from fennel_dagster.query.lookup import LookupFailed, lookup_state, lookup_state_records
from fennel_dagster.window import Continuous
from fennel_dagster.wire import spec
from tests.engine import repo

T0 = datetime(2026, 3, 1, tzinfo=UTC)


@meta(owner="lookups@example.com")
@dataset(index=True)
class Profile:
    uid: int = field(key=True)
    name: str
    score: float
    active: bool
    visits: int | None
    born: dt.date
    seen: datetime
    tags: list[str]
    balance: decimal.Decimal
    ts: datetime = field(timestamp=True)


def _profiles() -> pd.DataFrame:
    rows = []
    for i, uid in enumerate([1, 2, 3, 1, 2]):
        rows.append({
            "uid": uid, "name": f"user {uid}/{i}", "score": 0.5 * i, "active": i % 2 == 0,
            "visits": None if i == 3 else i, "born": dt.date(1990, 1, 1 + i),
            "seen": T0 + timedelta(microseconds=123457 * i), "tags": [f"t{i}"] * i,
            "balance": decimal.Decimal(f"{i}.25"), "ts": T0 + timedelta(hours=i),
        })  # fmt: skip
    return pd.DataFrame(rows)


def _both(
    mock: MockClient, name: str, keys: pd.DataFrame, at: pd.Series, fields: list[str] | None
) -> tuple[tuple[list[dict], list[bool]], tuple[list[dict], list[bool]]]:
    ds = mock._dataset(name)
    serves = mock._serving.get(name)
    frame, found = lookup_state(mock.state, ds, serves, keys, at, fields)
    want = (to_records(frame), [bool(f) for f in found])
    got = lookup_state_records(mock.state, ds, serves, to_records(keys), micros_of(at), fields)
    return want, got


@pytest.mark.parametrize("fields", [None, ["name"], ["uid", "score", "seen"], ["balance", "tags"]])
def test_index_records_equal_the_frame_answer(fields: list[str] | None) -> None:
    mock = MockClient()
    mock.commit("m", datasets=[Profile])
    mock.log(Profile, _profiles())
    keys = pd.DataFrame({"uid": pd.Series([1, 2, 3, 4, 1, 2, 3], dtype="Int64")})
    at = pd.Series(
        [T0 - timedelta(hours=1), T0 + timedelta(hours=1), T0 + timedelta(hours=9), T0,
         T0 + timedelta(hours=3, minutes=5), T0 + timedelta(hours=9), T0]
    )  # fmt: skip
    want, got = _both(mock, "Profile", keys, at, fields)
    assert got == want
    assert got[1] == [False, True, True, False, True, True, False]


def test_a_key_record_without_a_key_field_is_named_whichever_record_it_is() -> None:
    mock = MockClient()
    mock.commit("m", datasets=[Profile])
    mock.log(Profile, _profiles())
    ds, at = mock._dataset("Profile"), micros_of(pd.Series([T0, T0, T0]))
    with pytest.raises(LookupFailed, match=r"key record 2 \(user=3\) is missing uid"):
        lookup_state_records(mock.state, ds, None, [{"uid": 1}, {"uid": 2}, {"user": 3}], at)


def test_aggregate_records_equal_the_frame_answer() -> None:
    datasets = repo.graph("events")  # Spend: a Count and a Sum over a 1h continuous window
    mock = MockClient()
    mock.commit("m", datasets=datasets)
    mock.log(datasets[0], repo.events(200, keys=5))
    keys = pd.DataFrame({"uid": pd.Series([0, 1, 2, 3, 4, 99], dtype="Int64")})
    at = pd.Series([repo.T0 - timedelta(hours=1), *[repo.T0 + timedelta(minutes=40)] * 5])
    for fields in (None, ["total"]):
        want, got = _both(mock, "Spend", keys, at, fields)
        assert got == want
    assert got[1] == [False, True, True, True, True, False]


@meta(owner="lookups@example.com")
@dataset
class Order:
    shop: str
    uid: int
    qty: int
    price: float
    paid: bool
    note: str | None
    ts: datetime


@meta(owner="lookups@example.com")
@dataset(index=True)
class ShopUserStats:
    shop: str = field(key=True)
    uid: int = field(key=True)
    n: int
    qty: int
    spend: float
    avg: float
    least: int
    most: float
    spread: float
    p50: float | None
    decayed: float
    last_notes: list[str]
    kinds: list[bool]
    ts: datetime

    @pipeline
    @inputs(Order)
    def stats(cls, orders):
        w = Continuous("1h")
        return orders.groupby("shop", "uid").aggregate(
            n=Count(window=w),
            qty=Sum(of="qty", window=w),
            spend=Sum(of="price", window=w),
            avg=Avg(of="price", window=w),
            least=Min(of="qty", window=w, default=-1),
            most=Max(of="price", window=w, default=0.0),
            spread=Stddev(of="price", window=w),
            p50=Quantile(of="price", p=0.5, window=w),
            decayed=ExpDecaySum(of="price", window=w, half_life="10m"),
            last_notes=LastK(of="note", limit=2, dedup=False, window=w, dropnull=True),
            kinds=Distinct(of="paid", window=w),
        )


def _orders(n: int, seed: int) -> pd.DataFrame:
    rnd = random.Random(seed)
    return pd.DataFrame([
        {"shop": rnd.choice(["north", "south", "é-shop"]), "uid": rnd.randrange(3),
         "qty": rnd.randrange(-5, 50), "price": rnd.choice([0.5, 1.25, 7.0, 1e15, -3.5]),
         "paid": rnd.random() < 0.5, "note": rnd.choice([None, "a", "b"]),
         "ts": repo.T0 + timedelta(seconds=rnd.randrange(0, 7200))}
        for _ in range(n)
    ])  # fmt: skip


PLAIN = ["shop", "uid", "n", "qty", "spend", "avg", "least", "most", "spread", "p50", "decayed",
         "ts"]  # fmt: skip


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("fields", [PLAIN, None, ["n"], ["ts", "least", "uid"], ["kinds"]])
def test_aggregate_records_of_every_kind_equal_the_frame_answer(
    seed: int, fields: list[str] | None
) -> None:
    mock = MockClient()
    mock.commit("m", datasets=[Order, ShopUserStats])
    mock.log(Order, _orders(300, seed))
    rnd = random.Random(seed)
    keys = pd.DataFrame({
        "shop": [rnd.choice(["north", "south", "é-shop", "west"]) for _ in range(12)],
        "uid": pd.Series([rnd.randrange(4) for _ in range(12)], dtype="Int64"),
    })  # fmt: skip
    at = pd.Series([repo.T0 + timedelta(seconds=rnd.randrange(-600, 9000), microseconds=j * 7)
                    for j in range(12)])  # fmt: skip
    want, got = _both(mock, "ShopUserStats", keys, at, fields)
    assert json.dumps(got) == json.dumps(want)  # types too: JSON writes 3 and 3.0 apart
    assert any(got[1]) and not all(got[1])  # keys found and keys not found, both compared
    plain = lookup._plain_aggregate_records(
        mock.state, mock._dataset("ShopUserStats"), mock._serving["ShopUserStats"],
        to_records(keys), micros_of(at), fields,
    )  # fmt: skip
    # the frameless road answered every field it types; lists (LastK, Distinct) take frames
    assert (plain is None) == (fields is None or "kinds" in fields)


def test_keys_or_times_the_plain_road_does_not_type_take_the_frame_road() -> None:
    datasets = repo.graph("events")
    mock = MockClient()
    mock.commit("m", datasets=datasets)
    mock.log(datasets[0], repo.events(50, keys=3))
    ds, serves = mock._dataset("Spend"), mock._serving["Spend"]
    stamp = micros_of(pd.Series([repo.T0 + timedelta(minutes=30)]))
    for key in ({"uid": 2**63}, {"uid": True}, {"uid": 1.0}):
        assert lookup._plain_aggregate_records(mock.state, ds, serves, [key], stamp, None) is None
    far = [10**17]  # year 5138: beyond pandas' nanosecond range
    assert lookup._plain_aggregate_records(mock.state, ds, serves, [{"uid": 1}], far, None) is None
    assert lookup._plain_aggregate_records(mock.state, ds, serves, [{"uid": 1}], stamp, None)


_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**64), 2**64), st.floats(), st.text(max_size=3),
    st.sampled_from([np.int64(7), np.float64(2.5), np.float64("nan")]),
)  # fmt: skip
_TYPES = [
    spec.IntType(), spec.FloatType(), spec.BoolType(), spec.StringType(),
    spec.OptionalType(spec.FloatType()), spec.OptionalType(spec.IntType()),
    spec.BetweenType(spec.FloatType(), 0, 1), spec.BetweenType(spec.IntType(), 0, 9),
    spec.OneOfType(spec.IntType(), (1, 2)), spec.OneOfType(spec.StringType(), ("a",)),
    spec.OneOfType(spec.FloatType(), (1.5,)),
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    dtype=st.sampled_from(_TYPES),
    cells=st.lists(st.tuples(_SCALARS, st.booleans()), min_size=1, max_size=5),
)
def test_plain_values_are_typed_as_the_frame_road_types_them(
    dtype: spec.DType, cells: list[tuple[object, bool]]
) -> None:
    """Whatever ``_typed`` answers is what the frame road's cast and JSON give; values it
    cannot type (or the frame road refuses) make it step aside."""
    values, found = [v for v, _ in cells], [f for _, f in cells]
    try:
        # objects, as answers hold them: a frame would infer float64 for [None, 2**53 + 1]
        # and lose the int before the cast under test sees it
        col = pd.Series(values, dtype=object)
        missing = ~np.array(found)
        if missing.any():
            col = col.astype(object).where(~missing, None)
        want: object = json_column(astype(col, dtype))
    except Exception:  # noqa: BLE001 - the frame road refuses these values
        want = "refused"
    got = lookup._typed(values, dtype, found)
    if got is None:
        return  # the frame road answers (or refuses) it
    assert _strictly_equal(got, want), (got, want)


def _strictly_equal(a: object, b: object) -> bool:
    """Equal value by value, and of the same type (JSON writes 3 and 3.0 apart)."""
    return (
        isinstance(a, list)
        and isinstance(b, list)
        and len(a) == len(b)
        and all(
            type(x) is type(y) and (x == y or (x != x and y != y))
            for x, y in zip(a, b, strict=True)
        )
    )
