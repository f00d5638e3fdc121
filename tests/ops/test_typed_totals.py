"""A window's counts and sums come out as one typed array where every value is of one type
(``values.finish``): element by element the Python values the one-by-one road gives, of the
same type, and the one-by-one road wherever a value would differ (mixed ints and floats,
empty windows of a float column, totals beyond a float64's exact range, overflow)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fennel_dagster.ops import tiles
from fennel_dagster.ops.aggregate.values import _typed_sum, finish
from fennel_dagster.wire import spec


def _one_by_one(c: list[int], fc: list[int], s: list[int], scale: int) -> list[Any]:
    return [
        0 if k == 0 else tiles.to_float(x, scale) if f else tiles.to_int(x, scale)
        for k, f, x in zip(c, fc, s, strict=True)
    ]


_totals = st.integers(1, 30).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, 3), min_size=n, max_size=n),  # non-null count
        st.lists(st.integers(0, 3), min_size=n, max_size=n),  # of them floats (clipped below)
        st.lists(
            st.integers(-(2**53), 2**53)
            | st.integers(-(2**62), 2**62)
            | st.sampled_from([0, 1, -1, 2**53, 2**53 + 1, -(2**53) - 1]),
            min_size=n,
            max_size=n,
        ),
        st.sampled_from([0, 0, -1, -30, -52, -1074, -1100, 3, 970, 1000]),
        st.booleans(),  # every window of floats
    )
)


@settings(max_examples=400, deadline=None)
@given(_totals)
def test_typed_sums_are_the_one_by_one_values(case: tuple[Any, ...]) -> None:
    c, fc, s, scale, all_floats = case
    fc = [min(f, k) for f, k in zip(fc, c, strict=True)]
    if all_floats:
        c = [max(k, 1) for k in c]
        fc = [max(f, 1) for f in fc]
    try:
        expected = _one_by_one(c, fc, s, scale)
    except OverflowError:  # the one-by-one road raises: the typed road must not answer
        expected = None
    typed = _typed_sum(np.array(c), np.array(fc), np.array(s, dtype=np.int64), scale)
    if typed is None:
        return
    assert expected is not None
    got = typed.tolist()
    assert got == expected
    assert [type(v) for v in got] == [type(v) for v in expected]


def test_a_clean_window_of_floats_and_one_of_ints_take_the_typed_road() -> None:
    c, s = np.array([1, 2, 5]), np.array([3, -7, 2**40], dtype=np.int64)
    floats = _typed_sum(c, c, s, -10)
    assert floats is not None and floats.dtype == np.float64
    assert floats.tolist() == _one_by_one(c.tolist(), c.tolist(), s.tolist(), -10)
    ints = _typed_sum(c, np.zeros(3, dtype=np.int64), s, 0)
    assert ints is not None and ints.dtype == np.int64 and ints.tolist() == s.tolist()


@pytest.mark.parametrize(
    ("c", "fc", "s", "scale"),
    [
        ([0, 1], [0, 1], [0, 5], -2),  # an empty window of a float column sums to int 0
        ([2, 1], [1, 0], [6, 5], -2),  # a window of ints beside one of floats
        ([1], [1], [2**53 + 1], 0),  # not a float64 exactly
        ([1], [1], [1], 1100),  # beyond a float64: the one-by-one road's error stands
        ([1], [0], [3], 2),  # ints on a scale: shifted one by one
    ],
)
def test_values_a_typed_array_would_change_go_one_by_one(
    c: list[int], fc: list[int], s: list[int], scale: int
) -> None:
    assert _typed_sum(np.array(c), np.array(fc), np.array(s, dtype=np.int64), scale) is None


def test_counts_are_int64_of_the_same_values() -> None:
    agg = spec.AggSpec("count", "n", spec.WindowSpec("continuous", duration=3600))
    n = np.array([0, 3, 2**40])
    out = finish(agg, lambda col, stat: n, None, 0)
    assert isinstance(out, np.ndarray) and out.dtype == np.int64
    assert out.tolist() == [0, 3, 2**40]
