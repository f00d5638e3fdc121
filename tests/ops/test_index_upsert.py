"""An index batch's entries are built for the whole batch at once (``ops.index.upsert``):
the same keys and bytes as one row at a time, its key's prefix, time and the CRC of its
canonical JSON, which the Spark side computes too (``batch.asof``)."""

from __future__ import annotations

import zlib
from typing import Any

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from fennel_dagster.ops import index
from fennel_dagster.ops.keys import entry_key, micros
from fennel_dagster.ops.rows import dumps, from_records, to_records
from fennel_dagster.ops.state import WriteBatch
from fennel_dagster.wire import spec


def _dataset(keys: tuple[spec.FieldSpec, ...]) -> spec.DatasetSpec:
    fields = (*keys,
              spec.FieldSpec("amount", spec.OptionalType(spec.FloatType())),
              spec.FieldSpec("ts", spec.TimestampType(), timestamp=True))  # fmt: skip
    return spec.DatasetSpec(name="Users", version=1, fields=fields)


INT_KEY = (spec.FieldSpec("uid", spec.IntType(), key=True),)
TWO_KEYS = (spec.FieldSpec("uid", spec.IntType(), key=True),
            spec.FieldSpec("city", spec.StringType(), key=True))  # fmt: skip


def _one_by_one(ds: spec.DatasetSpec, rows: pd.DataFrame, deleted: list[bool]) -> dict[bytes, Any]:
    """The entries as the index wrote them a row at a time."""
    out = {}
    records = to_records(rows, [f.name for f in ds.fields])
    for rec, stamp, gone in zip(records, rows["ts"].tolist(), deleted, strict=True):
        if gone:
            rec = {**rec, index.DELETED: True}
        key = entry_key(tuple(rec[k] for k in ds.keys), micros(pd.Timestamp(stamp)),
                        zlib.crc32(dumps(rec)))  # fmt: skip
        out[key] = dumps(rec)
    return out


_row = st.fixed_dictionaries({
    "uid": st.integers(-(2**63), 2**63 - 1),
    "city": st.text(max_size=4),
    "amount": st.none() | st.floats(allow_nan=True, allow_infinity=True),
    "ts": st.integers(-(2**40), 2**52).map(
        lambda us: (pd.Timestamp("2000-01-01", tz="UTC") + pd.Timedelta(microseconds=us))
        .isoformat()),
})  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(_row, st.booleans()), min_size=1, max_size=12),
    st.sampled_from([INT_KEY, TWO_KEYS]),
)
def test_a_batch_writes_what_one_row_at_a_time_wrote(
    rows: list[tuple[dict[str, Any], bool]], keys: tuple[spec.FieldSpec, ...]
) -> None:
    ds = _dataset(keys)
    frame = from_records([{f.name: r[f.name] for f in ds.fields} for r, _ in rows], ds.fields)
    deleted = [d for _, d in rows]
    wb = WriteBatch()
    index.upsert(ds, frame, wb, pd.Series(deleted))
    assert wb.space(index.namespace(ds.name)) == _one_by_one(ds, frame, deleted)


def test_an_empty_batch_writes_nothing() -> None:
    ds = _dataset(INT_KEY)
    wb = WriteBatch()
    index.upsert(ds, from_records([], ds.fields), wb)
    assert len(wb) == 0
