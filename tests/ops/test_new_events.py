"""A batch's events to record: numeric columns are read at once with numpy, and give exactly
what the value-by-value road (``json_value``, ``tag_of``, ``bits_of``) gives."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from fennel_dagster.ops.aggregate.codec import bits_of, tag_of
from fennel_dagster.ops.aggregate.events import NewEvents, _numeric
from fennel_dagster.ops.rows import json_value

floats = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))
ints = st.one_of(st.none(), st.integers(-(1 << 63), (1 << 63) - 1))


def one_by_one(col: pd.Series) -> tuple[list[int], list[int]]:
    vals = [json_value(v) for v in col.tolist()]
    tags = [tag_of(v) for v in vals]
    return tags, [bits_of(v, t) for v, t in zip(vals, tags, strict=True)]


def at_once(col: pd.Series) -> tuple[list[int], list[int]]:
    got = _numeric(col)
    assert got is not None, f"{col.dtype} took the value-by-value road"
    return got[0].tolist(), got[1].tolist()


@given(st.lists(floats, max_size=30))
def test_nullable_and_plain_floats_at_once_equal_one_by_one(values: list[float | None]) -> None:
    nullable = pd.Series(pd.array(values, dtype="Float64"))
    plain = pd.Series([math.nan if v is None else v for v in values], dtype=np.float64)
    for col in (nullable, plain):
        assert at_once(col) == one_by_one(col)


def test_a_nan_held_in_a_nullable_column_unmasked_is_null_as_on_the_other_road() -> None:
    arr = pd.arrays.FloatingArray(np.array([1.5, np.nan, 2.0]), np.array([False, False, True]))
    col = pd.Series(arr)
    assert at_once(col) == one_by_one(col) == ([2, 0, 0], [one_by_one(col)[1][0], 0, 0])


@given(st.lists(ints, max_size=30))
def test_nullable_ints_at_once_equal_one_by_one(values: list[int | None]) -> None:
    col = pd.Series(pd.array(values, dtype="Int64"))
    assert at_once(col) == one_by_one(col)


def test_other_columns_keep_the_value_by_value_road() -> None:
    df = pd.DataFrame({"name": ["a", None], "big": [1 << 70, 3]})
    assert _numeric(df["name"]) is None and _numeric(df["big"]) is None
    ev = NewEvents.of(df, ["big", "name"])
    assert ev.tags["name"].tolist() == [3, 0] and ev.tags["big"].tolist() == [3, 1]
    assert ev.slow["big"] == [1 << 70, 3]
