"""Fennel's words for rows its MockClient refuses when they are logged.

``MockClient.log`` refuses rows that do not fit the dataset's schema; Fennel's mock says why
in words its users' tests compare with ``==`` (``fennel_dagster.errors``): first the cast of
each key and value column to its type, then the restrictions (between, oneof, regex) of
every column. This module renders those words for the rows ``check_rows`` found bad, or
None where it cannot tell what Fennel would say (the mock then says it in ours).
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd
import pyarrow as pa

from fennel_dagster.wire import spec

_ARROW: dict[type, tuple[str, pa.DataType]] = {
    spec.IntType: ("int", pa.int64()),
    spec.FloatType: ("float", pa.float64()),
    spec.StringType: ("string", pa.string()),
    spec.BoolType: ("bool", pa.bool_()),
}


def rejection_text(ds: spec.DatasetSpec, df: pd.DataFrame) -> str | None:
    """Fennel's message for logging ``df`` to ``ds`` (None: not known here)."""
    at = f"Schema validation failed during data insertion to `{ds.name}`"
    fields = [f for f in ds.fields if f.key] + [
        f for f in ds.fields if not f.key and not f.timestamp
    ]
    for f in fields:
        if f.name not in df.columns:
            return f"{at}: Field `{f.name}` not found in dataframe while logging to dataset"
        problem = _cast_problem(df[f.name], f.dtype)
        if problem is not None:
            return f"{at}: Failed to cast data logged to column `{f.name}` of type {problem}"
    stamp = [f for f in ds.fields if f.timestamp]
    problems = [
        p
        for f in fields + stamp
        if f.name in df.columns and (p := _restriction_problem(df[f.name], f.dtype, f.name))
    ]
    return f"{at} {[ValueError(p) for p in problems]}" if problems else None


def _cast_problem(values: pd.Series, dtype: spec.DType) -> str | None:
    """```type`: why``, if the column does not cast to its Arrow type as Fennel casts it;
    None if it does, or if the type is not one whose words are known here."""
    optional = isinstance(dtype, spec.OptionalType)
    core = dtype.of if isinstance(dtype, spec.OptionalType) else dtype
    known = _ARROW.get(type(core))
    if known is None:
        return None
    name = f"optional({known[0]})" if optional else known[0]
    if not optional and values.isnull().any():
        return f"`{name}`: Null values found in non-optional field."
    try:
        values.astype(pd.ArrowDtype(known[1]))
    except (pa.ArrowException, ValueError, TypeError) as e:
        return f"`{name}`: {e}"
    return None


def _restriction_problem(values: pd.Series, dtype: spec.DType, name: str) -> str | None:
    """Fennel's words for the first value of the column its restriction refuses."""
    core = dtype.of if isinstance(dtype, spec.OptionalType) else dtype
    present = [v for v in values.tolist() if not _null(v)]
    match core:
        case spec.BetweenType(of=inner, min=lo, max=hi):
            whole = isinstance(inner, spec.IntType)
            low, high = (int(lo), int(hi)) if whole else (lo, hi)
            for v in present:
                if low > v or high < v:
                    return (f"Field `{name}` is of type between, but Value {v} is out of bounds "
                            f"for between type, bounds are [{low}, {high}].")  # fmt: skip
        case spec.OneOfType(options=options):
            for v in present:
                if v not in options:
                    return (f"Field `{name}` is of type oneof, but Value {v} is not in options "
                            f"{list(options)}.")  # fmt: skip
        case spec.RegexType(pattern=pattern):
            for v in present:
                if isinstance(v, str) and not re.match(pattern, v):
                    return (f"Field `{name}` is of type regex[str], but Value {v} does not "
                            f"match regex {pattern}.")  # fmt: skip
    return None


def _null(value: Any) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False
