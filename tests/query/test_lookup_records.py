"""The lookup endpoint's answer (JSON records, no DataFrame) equals the DataFrame answer every
other reader uses, field for field: for every type, found or not, before a key's first row,
after a delete, for any subset of fields, for an index and for an aggregate's state."""

from __future__ import annotations

import datetime as dt
import decimal
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from fennel_dagster import dataset, field, meta
from fennel_dagster.mock import MockClient
from fennel_dagster.ops.keys import micros_of
from fennel_dagster.ops.rows import to_records
from fennel_dagster.query.lookup import LookupFailed, lookup_state, lookup_state_records
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
