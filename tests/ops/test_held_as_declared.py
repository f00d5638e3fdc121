"""``held_as_declared``: the engine skips ``check_rows`` for a frame whose dtypes already say
every row fits, so such a frame must be one ``check_rows`` passes whole, with the same
records; and the frames it refuses include every one with a bad row."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from fennel_dagster.ops import limits
from fennel_dagster.ops.rows import dumps, to_records
from fennel_dagster.ops.schema import check_rows, held_as_declared
from fennel_dagster.wire import spec

FIELDS = (
    spec.FieldSpec("uid", spec.IntType(), key=True),
    spec.FieldSpec("amount", spec.FloatType()),
    spec.FieldSpec("note", spec.OptionalType(spec.StringType())),
    spec.FieldSpec("flag", spec.BoolType()),
    spec.FieldSpec("ts", spec.TimestampType(), timestamp=True),
)
DS = spec.DatasetSpec(name="Rows", version=1, fields=FIELDS)

# None in one draw of ten or so: enough frames with no null where none may be
ints = st.integers(-(2**63), 2**63 - 1) | st.integers(-3, 3) | st.none()
floats = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-3, 3) | st.none()
notes = st.text(max_size=5) | st.none() | st.integers(0, 3)
flags = st.booleans() | st.booleans() | st.none()
times = st.integers(-(2**62), 2**62) | st.integers(0, 2**62) | st.none()


@st.composite
def frames(draw: st.DrawFn) -> pd.DataFrame:
    n = draw(st.integers(1, 6))
    cols = {
        "uid": draw(st.lists(ints, min_size=n, max_size=n)),
        "amount": draw(st.lists(floats, min_size=n, max_size=n)),
        "note": draw(st.lists(notes, min_size=n, max_size=n)),
        "flag": draw(st.lists(flags, min_size=n, max_size=n)),
        "ts": draw(st.lists(times, min_size=n, max_size=n)),
    }
    df = pd.DataFrame({k: pd.Series(v, dtype=object) for k, v in cols.items()})
    # the dtypes operators hand over, where the values allow them
    for name, dtype in (("uid", "Int64"), ("amount", "float64"), ("flag", "boolean")):
        # (or left as Python values in an object column, as an aggregate hands them over)
        if draw(st.booleans()):
            try:
                df[name] = df[name].astype(dtype)
            except (TypeError, ValueError, OverflowError):
                pass
    if draw(st.booleans()):
        df["ts"] = pd.to_datetime(df["ts"], unit="ns", utc=True)
    return df


@settings(max_examples=300, deadline=None)
@given(frames())
def test_a_frame_held_as_declared_is_one_check_rows_passes_whole(df: pd.DataFrame) -> None:
    if not held_as_declared(DS, df):  # walked row by row by check_rows: only a cost
        return
    good, bad = check_rows(DS, df)
    names = [f.name for f in FIELDS]
    assert not bad
    # as bytes: 3 == 3.0 in Python, but "3" is not "3.0" on a topic
    assert [dumps(r) for r in to_records(good, names)] == [dumps(r) for r in to_records(df, names)]


@st.composite
def declared(draw: st.DrawFn) -> pd.DataFrame:
    """Frames as operators hand them over: each column of its field's dtype, no misfit."""
    n = draw(st.integers(1, 6))

    def col(strategy: st.SearchStrategy) -> list:
        return draw(st.lists(strategy, min_size=n, max_size=n))

    return pd.DataFrame({
        "uid": pd.Series(col(st.integers(-(2**63), 2**63 - 1)),
                         dtype=draw(st.sampled_from(["Int64", "int64"]))),
        "amount": pd.Series(col(st.floats(allow_nan=False, allow_infinity=False)),
                            dtype="float64"),
        "note": pd.Series(col(st.text(max_size=5) | st.none()), dtype=object),
        "flag": pd.Series(col(st.booleans()), dtype=draw(st.sampled_from(["bool", "boolean"]))),
        "ts": pd.to_datetime(col(st.integers(-(2**62), 2**62)), unit="ns", utc=True),
    })  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(declared())
def test_frames_as_operators_hand_them_over_skip_the_walk(df: pd.DataFrame) -> None:
    assert held_as_declared(DS, df)
    good, bad = check_rows(DS, df)
    names = [f.name for f in FIELDS]
    assert not bad
    assert [dumps(r) for r in to_records(good, names)] == [dumps(r) for r in to_records(df, names)]


def test_each_misfit_is_refused() -> None:
    ok = pd.DataFrame({
        "uid": pd.Series([1, 2], dtype="Int64"), "amount": [1.5, 2.0],
        "note": [None, "x"], "flag": pd.Series([True, False], dtype="boolean"),
        "ts": pd.to_datetime([0, 10**15], unit="us", utc=True),
    })  # fmt: skip
    assert held_as_declared(DS, ok)
    assert not check_rows(DS, ok)[1]
    misfits = {
        "a null int": ok.assign(uid=pd.Series([1, None], dtype="Int64")),
        "an infinite float": ok.assign(amount=[1.5, np.inf]),
        "ints for a float field": ok.assign(amount=[1, 2]),
        "a non-string note": ok.assign(note=[None, 3]),
        "an over-long note": ok.assign(note=["x" * (limits.MAX_TEXT_CHARS + 1), None]),
        "naive times": ok.assign(ts=pd.to_datetime([0, 1], unit="s")),
        "a missing field": ok.drop(columns=["flag"]),
        "an int among Python floats": ok.assign(amount=pd.Series([1.5, 2], dtype=object)),
        "a bool among Python ints": ok.assign(uid=pd.Series([1, True], dtype=object)),
        "a Python int beyond int64": ok.assign(uid=pd.Series([1, 2**63], dtype=object)),
        "a Python NaN in a float field": ok.assign(amount=pd.Series([1.5, np.nan], dtype=object)),
    }
    held = ok.assign(uid=pd.Series([1, 2], dtype=object),
                     amount=pd.Series([1.5, 2.0], dtype=object),
                     flag=pd.Series([True, False], dtype=object))  # fmt: skip
    assert held_as_declared(DS, held), "an aggregate's Python values, each of its field's type"
    for what, df in misfits.items():
        assert not held_as_declared(DS, df), what
