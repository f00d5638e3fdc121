"""A batch of internal messages decodes to what its messages give one by one
(``engine.jobs.common.decode_messages``), though consecutive batch messages of one schema
are typed as one table."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from fennel_dagster.engine.jobs.common import decode_messages
from fennel_dagster.engine.messages import InMessage
from fennel_dagster.ops import batches
from fennel_dagster.ops.index import DELETED
from fennel_dagster.ops.rows import dumps, from_records, loads, to_records
from fennel_dagster.wire import spec

FIELDS = [
    spec.FieldSpec("uid", spec.IntType(), key=True),
    spec.FieldSpec("amount", spec.OptionalType(spec.FloatType())),
    spec.FieldSpec("name", spec.OptionalType(spec.StringType())),
    spec.FieldSpec("ts", spec.TimestampType(), timestamp=True),
    spec.FieldSpec("tags", spec.OptionalType(spec.ListType(spec.StringType()))),
]
# a writer that did not know the Optional fields yet: another schema on the same topic
OLDER = [f for f in FIELDS if f.name in ("uid", "ts")]

_row = st.fixed_dictionaries({
    "uid": st.integers(-(2**63), 2**63 - 1),
    "amount": st.none() | st.floats(allow_nan=False, allow_infinity=False),
    "name": st.none() | st.text(max_size=5),
    "ts": st.integers(0, 2**40).map(
        lambda us: (pd.Timestamp("2020-01-01", tz="UTC") + pd.Timedelta(microseconds=us))
        .isoformat()),
    "tags": st.none() | st.lists(st.text(max_size=3), max_size=2),
})  # fmt: skip
_message = st.one_of(
    st.tuples(st.just("batch"), st.lists(st.tuples(_row, st.booleans()), min_size=1, max_size=5)),
    st.tuples(st.just("older"), st.lists(st.tuples(_row, st.booleans()), min_size=1, max_size=5)),
    st.tuples(st.just("json"), _row),
    st.tuples(st.just("broken"), st.just(None)),
    st.tuples(st.just("tombstone"), st.just(None)),
)


def _value(kind: str, body: Any) -> bytes | None:
    if kind in ("batch", "older"):
        fields = FIELDS if kind == "batch" else OLDER
        frame = from_records([{f.name: r[f.name] for f in fields} for r, _ in body], fields)
        return batches.encode(frame, fields, [d for _, d in body])
    if kind == "json":
        return dumps(body)
    if kind == "broken":
        return batches.encode(from_records([], FIELDS), FIELDS)[:12]
    return None


def _one_by_one(values: list[bytes | None]) -> tuple[list[pd.DataFrame], list[bool], list[int]]:
    frames: list[pd.DataFrame] = []
    flags: list[bool] = []
    origin: list[int] = []
    for i, v in enumerate(values):
        if v is None:
            continue
        if batches.is_batch(v):
            try:
                frame, deleted = batches.decode(v, FIELDS)
            except batches.BatchFormatError:
                continue
            flags += deleted.tolist()
        else:
            rec = loads(v)
            frame = from_records([rec], FIELDS)
            flags.append(bool(rec.get(DELETED)))
        frames.append(frame)
        origin += [i] * len(frame)
    return frames, flags, origin


@settings(max_examples=150, deadline=None)
@given(st.lists(_message, min_size=1, max_size=10))
def test_many_messages_decode_as_each_alone(messages: list[tuple[str, Any]]) -> None:
    values = [_value(kind, body) for kind, body in messages]
    msgs = [InMessage("t", 0, i, None, v, 0) for i, v in enumerate(values)]
    got = decode_messages(msgs, FIELDS, "D")
    frames, flags, origin = _one_by_one(values)
    assert got.origin == origin
    assert got.deleted.tolist() == flags
    assert len(got.errors) == sum(1 for kind, _ in messages if kind == "broken")
    assert all(e.stage == "decode" for e in got.errors)
    want = pd.concat(frames, ignore_index=True) if frames else from_records([], FIELDS)
    assert list(got.rows.columns) == list(want.columns)
    for c in want.columns:
        assert got.rows[c].dtype == want[c].dtype, c
        assert to_records(got.rows[[c]]) == to_records(want[[c]]), c


def test_a_run_of_batch_messages_is_typed_once(monkeypatch: Any) -> None:
    """What the grouping is for: one typing of the table for a run of one schema, another
    where the schema changes."""
    typed: list[int] = []
    frame_of = batches.frame_of

    def counting(table: Any, fields: Any) -> tuple[pd.DataFrame, np.ndarray]:
        typed.append(table.num_rows)
        return frame_of(table, fields)

    monkeypatch.setattr(batches, "frame_of", counting)
    row = {"uid": 1, "amount": 1.0, "name": "a", "ts": "2026-01-01T00:00:00+00:00", "tags": None}
    values = [_value("batch", [(row, False)] * 3) for _ in range(4)]
    values.append(_value("older", [(row, False)] * 2))
    msgs = [InMessage("t", 0, i, None, v, 0) for i, v in enumerate(values)]
    got = decode_messages(msgs, FIELDS, "D")
    assert typed == [12, 2]
    assert len(got.rows) == 14
