"""The offline writer's straight road: ``records_to_arrow`` must build exactly the table the
typed road (``to_arrow(from_records(...))``) builds, whenever it takes the records; and it
takes the rows our own jobs write."""

from __future__ import annotations

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from fennel_dagster.offline.table import records_to_arrow, to_arrow
from fennel_dagster.ops.rows import dumps, from_records, json_value, loads
from fennel_dagster.wire import spec

FIELDS = (
    spec.FieldSpec("uid", spec.IntType(), key=True),
    spec.FieldSpec("amount", spec.FloatType()),
    spec.FieldSpec("note", spec.OptionalType(spec.StringType())),
    spec.FieldSpec("flag", spec.OptionalType(spec.BoolType())),
    spec.FieldSpec("ts", spec.TimestampType(), timestamp=True),
)
DS = spec.DatasetSpec(name="Rows", version=1, fields=FIELDS)
US = st.integers(-(2**62) // 1000, 2**62 // 1000)  # µs within pandas' range

anything = (
    st.none() | st.booleans() | st.integers(-(2**64), 2**64) | st.floats() | st.text(max_size=3)
)


def _typed_road(records: list[dict], deleted: list[bool]):  # type: ignore[no-untyped-def]
    n = len(records)
    rows = from_records(records, FIELDS)
    return to_arrow(rows, pd.Series(deleted), list(range(n)), list(range(n)), DS)


@st.composite
def written(draw: st.DrawFn) -> list[dict]:
    """Rows as our jobs write them: typed values, timestamps as json_value's UTC text."""
    n = draw(st.integers(1, 5))
    out = []
    for _ in range(n):
        ts = pd.Timestamp(draw(US), unit="us", tz="UTC")
        rec = {
            "uid": draw(st.integers(-(2**63), 2**63 - 1)),
            "amount": draw(st.floats(allow_nan=False) | st.integers(-(2**53), 2**53)),
            "note": draw(st.text(max_size=4) | st.none()),
            "flag": draw(st.booleans() | st.none()),
            "ts": json_value(ts),
        }
        out.append(loads(dumps(rec)))  # through the topic's bytes
    return out


@settings(max_examples=200, deadline=None)
@given(written(), st.data())
def test_rows_our_jobs_write_take_the_straight_road_to_the_same_table(records, data) -> None:  # type: ignore[no-untyped-def]
    deleted = data.draw(st.lists(st.booleans(), min_size=len(records), max_size=len(records)))
    n = len(records)
    got = records_to_arrow(records, deleted, list(range(n)), list(range(n)), DS)
    assert got is not None
    assert got.equals(_typed_road(records, deleted))


times = US.map(lambda us: json_value(pd.Timestamp(us, unit="us", tz="UTC")))
# each field: its own kind of value, or anything (another JSON type, a big int, NaN, ...)
loose = {"uid": st.integers() | anything, "amount": st.floats() | anything,
         "note": anything, "flag": anything, "ts": times | anything}  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(st.fixed_dictionaries(loose), min_size=1, max_size=3))
def test_any_records_it_takes_give_the_typed_roads_table(records) -> None:  # type: ignore[no-untyped-def]
    deleted = [False] * len(records)
    n = len(records)
    got = records_to_arrow(records, deleted, list(range(n)), list(range(n)), DS)
    if got is None:  # the typed road's (it may also refuse them: an error record)
        return
    assert got.equals(_typed_road(records, deleted))


def test_what_it_leaves_to_the_typed_road() -> None:
    ok = {"uid": 1, "amount": 1.5, "note": None, "flag": True, "ts": "2026-01-01T00:00:00+00:00"}
    assert records_to_arrow([ok], [False], [0], [0], DS) is not None
    for what, bad in {
        "a bool for an int": {**ok, "uid": True},
        "a float for an int": {**ok, "uid": 5.0},
        "an int beyond int64": {**ok, "uid": 2**63},
        "a time not in UTC": {**ok, "ts": "2026-01-01T01:00:00+01:00"},
        "nanoseconds": {**ok, "ts": "2026-01-01T00:00:00.123456789+00:00"},
        "epoch seconds": {**ok, "ts": 1767225600},
        "an int for a bool": {**ok, "flag": 1},
        "NaN (null on the typed road)": {**ok, "amount": float("nan")},
    }.items():
        assert records_to_arrow([bad], [False], [0], [0], DS) is None, what
