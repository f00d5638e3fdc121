"""The pandas expression compiler: values, null propagation, and clear failures."""

from __future__ import annotations

import pandas as pd
import pytest

from fennel_dagster.expr import col, lit, when
from fennel_dagster.ops.expr import ExprError, evaluate
from fennel_dagster.wire import spec

DF = pd.DataFrame(
    {
        "a": pd.array([1, 5, None, 10], dtype="Int64"),
        "s": ["Ab", "cd", None, "ef"],
        "t": pd.to_datetime(
            ["2026-01-01T03:00", "2026-01-02T04:30", "2026-01-03T05:00", "2026-01-04T06:00"],
            utc=True,
        ),
        "l": [[1, 2], [], [3], [4, 5, 6]],
    }
)


def values(e) -> list:
    return [None if pd.isna(v) else v for v in evaluate(e.node, DF).tolist()]


def test_arithmetic_and_comparison_propagate_nulls() -> None:
    assert values(col("a") * 2 + 1) == [3, 11, None, 21]
    assert values(col("a") > 4) == [False, True, None, True]
    assert values((col("a") > 4) & (col("a") < 10)) == [False, True, None, False]
    assert values(col("a") / 0) == [None, None, None, None]


def test_when_falls_through_null_conditions_to_otherwise() -> None:
    e = (
        when(col("a") > 4)
        .then(lit("big"))
        .when(col("a") > 0)
        .then(lit("small"))
        .otherwise(lit("none"))
    )
    assert values(e) == ["small", "big", "none", "big"]


def test_fillnull_isnull_and_astype() -> None:
    assert values(col("a").fillnull(0).astype(float)) == [1.0, 5.0, 0.0, 10.0]
    assert values(col("s").isnull()) == [False, False, True, False]


def test_string_datetime_and_list_namespaces() -> None:
    assert values(col("s").str.lower()) == ["ab", "cd", None, "ef"]
    assert values(col("s").str.len()) == [2, 2, None, 2]
    assert values(col("t").dt.hour) == [3, 4, 5, 6]
    assert values(col("l").list.len()) == [2, 0, 1, 3]


def test_unknown_function_and_missing_column_fail_with_names() -> None:
    with pytest.raises(ExprError, match="unknown expression function 'str.reverse'"):
        evaluate(spec.Call("str.reverse", (spec.Col("s"),)), DF)
    with pytest.raises(ExprError, match=r"column 'zz' is not in the input \(columns: a, s, t, l\)"):
        evaluate(spec.Col("zz"), DF)
