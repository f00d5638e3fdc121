"""Row batches decode to exactly the rows the JSON row format gives (ops.batches)."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fennel_dagster.ops import batches
from fennel_dagster.ops.index import DELETED
from fennel_dagster.ops.rows import dumps, from_records, loads, to_records
from fennel_dagster.wire import spec

FIELDS = [
    spec.FieldSpec("uid", spec.IntType(), key=True),
    spec.FieldSpec("amount", spec.OptionalType(spec.FloatType())),
    spec.FieldSpec("ok", spec.OptionalType(spec.BoolType())),
    spec.FieldSpec("name", spec.OptionalType(spec.StringType())),
    spec.FieldSpec("ts", spec.TimestampType(), timestamp=True),
    spec.FieldSpec("tags", spec.OptionalType(spec.ListType(spec.StringType()))),
    spec.FieldSpec("price", spec.OptionalType(spec.DecimalType(2))),
    spec.FieldSpec("day", spec.OptionalType(spec.DateType())),
    spec.FieldSpec("n", spec.OptionalType(spec.IntType())),
]

_stamps = st.integers(-(2**40), 2**52).map(
    lambda us: (pd.Timestamp("2000-01-01", tz="UTC") + pd.Timedelta(microseconds=us)).isoformat()
)
_row = st.fixed_dictionaries({
    "uid": st.integers(-(2**63), 2**63 - 1),
    "amount": st.none() | st.floats(allow_nan=True, allow_infinity=True),
    "ok": st.none() | st.booleans(),
    "name": st.none() | st.text(max_size=20),
    "ts": _stamps,
    "tags": st.none() | st.lists(st.text(max_size=5), max_size=3),
    "price": st.none() | st.decimals(places=2, allow_nan=False, allow_infinity=False,
                                      min_value=-(10**6), max_value=10**6).map(str),
    "day": st.none() | st.dates().map(dt.date.isoformat),
    "n": st.none() | st.integers(-(2**63), 2**63 - 1),
})  # fmt: skip


def _json_path(frame: pd.DataFrame, deleted: list[bool]) -> pd.DataFrame:
    """What a reader got from one JSON message per row."""
    recs = to_records(frame, [f.name for f in FIELDS])
    for r, d in zip(recs, deleted, strict=True):
        if d:
            r[DELETED] = True
    return from_records([loads(dumps(r)) for r in recs], FIELDS)


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert list(a.columns) == list(b.columns)
    for c in a.columns:
        assert a[c].dtype == b[c].dtype, c
        assert to_records(a[[c]]) == to_records(b[[c]]), c
        assert [type(v) for v in a[c].tolist()] == [type(v) for v in b[c].tolist()], c


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_row, st.booleans()), min_size=1, max_size=12))
def test_a_batch_decodes_to_the_rows_json_gives(rows: list[tuple[dict[str, Any], bool]]) -> None:
    frame = from_records([r for r, _ in rows], FIELDS)
    deleted = [d for _, d in rows]
    got, flags = batches.decode(batches.encode(frame, FIELDS, deleted), FIELDS)
    _same(got, _json_path(frame, deleted))
    assert flags.tolist() == deleted


@settings(max_examples=150, deadline=None)
@given(
    st.lists(_row, min_size=1, max_size=8),
    st.sets(st.sampled_from(["uid", "amount", "ok", "name", "n"])),
    st.lists(st.none() | st.integers(-(2**70), 2**70) | st.floats() | st.booleans()
             | st.text(max_size=3), min_size=8, max_size=8),
)  # fmt: skip
def test_python_values_in_object_columns_decode_as_json_would(
    rows: list[dict[str, Any]], as_objects: set[str], odd: list[Any]
) -> None:
    """An operator's output columns are often Python values (object dtype), sometimes of
    another type than the field's: each decodes to what the JSON row format gave, or fails
    to decode as it did."""
    frame = from_records(rows, FIELDS)
    for c in as_objects:
        frame[c] = pd.Series(frame[c].astype(object).where(frame[c].notna(), None).tolist(),
                             dtype=object)  # fmt: skip
    column = sorted(as_objects)[0] if as_objects else None
    if column is not None:
        frame.loc[0, column] = odd[len(rows) % 8]
    try:
        want = _json_path(frame, [False] * len(rows))
    except (TypeError, ValueError, OverflowError):
        with pytest.raises((TypeError, ValueError, OverflowError)):
            batches.decode(batches.encode(frame, FIELDS), FIELDS)
        return
    got, _ = batches.decode(batches.encode(frame, FIELDS), FIELDS)
    _same(got, want)


def test_columns_of_other_dtypes_still_decode_as_json_would() -> None:
    # what an operator may leave in a frame: floats in an int field, ints as objects, a naive
    # time, a microsecond-unit time
    frame = pd.DataFrame({
        "uid": pd.Series([1.0, 2.0]), "amount": pd.Series([1, None], dtype=object),
        "ok": pd.Series([True, None], dtype=object), "name": pd.Series(["a", 3], dtype=object),
        "ts": pd.Series(pd.to_datetime(["2026-01-01T00:00:00.000001", "2026-01-02"], format="ISO8601")),
        "tags": pd.Series([["x"], None], dtype=object),
        "price": pd.Series([decimal.Decimal("1.50"), None], dtype=object),
        "day": pd.Series([dt.date(2026, 1, 1), None], dtype=object),
        "n": pd.Series([2**62, -5], dtype="int64"),
    })  # fmt: skip
    got, _ = batches.decode(batches.encode(frame, FIELDS), FIELDS)
    _same(got, _json_path(frame, [False, False]))


def test_records_and_split_keep_every_row_and_its_tombstone() -> None:
    rows = [{"uid": i, "ts": "2026-01-01T00:00:00+00:00", "name": f"r{i}"} for i in range(3)]
    frame = from_records(rows, FIELDS)
    value = batches.encode(frame, FIELDS, [False, True, False])
    recs = batches.records(value, FIELDS)
    assert [r["uid"] for r in recs] == [0, 1, 2]
    assert [r.get(DELETED, False) for r in recs] == [False, True, False]
    # a reader that does not know the dataset reads the same JSON-safe values
    blind = batches.rows_of(value)
    assert [(r["uid"], r["name"], r["ts"]) for r in blind] == [
        (r["uid"], r["name"], r["ts"]) for r in recs
    ]
    one_each = batches.split(value)
    assert [batches.records(v, FIELDS) for v in one_each] == [[r] for r in recs]
    assert batches.rows_of(dumps(rows[0])) == [rows[0]]  # a JSON row: the format before


def test_a_newer_or_broken_batch_is_a_clear_error() -> None:
    frame = from_records([{"uid": 1, "ts": "2026-01-01T00:00:00+00:00"}], FIELDS)
    value = batches.encode(frame, FIELDS)
    newer = value[:4] + bytes([batches.VERSION + 1]) + value[5:]
    with pytest.raises(batches.BatchFormatError, match="version 2"):
        batches.decode(newer, FIELDS)
    with pytest.raises(batches.BatchFormatError, match="Arrow cannot read"):
        batches.decode(value[:20], FIELDS)


def test_version_one_bytes_written_today_stay_readable() -> None:
    """A batch of format version 1, as bytes (made once with this module, kept here): the
    reader of any later version must still read it."""
    frame = from_records([{"uid": 7, "ts": "2026-01-01T00:00:00+00:00", "amount": 2.5,
                           "tags": ["a"]}], FIELDS)  # fmt: skip
    value = batches.encode(frame, FIELDS)
    assert value[:5] == b"\xffFDB\x01"
    table = pa.ipc.open_stream(pa.py_buffer(value)[5:]).read_all()
    assert table.schema.field("tags").metadata == {b"fd.encoding": b"json"}
    assert table.schema.field("uid").type == pa.int64()
    assert batches.records(value, FIELDS)[0]["tags"] == ["a"]
    assert np.array_equal(batches.decode(value, FIELDS)[1], [False])
