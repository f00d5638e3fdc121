"""Min and Max of dates and datetimes: read as integers by the tiles, answered in their type.

Tiles keep exact integer extremes (``codec``), so a datetime aggregates as its microseconds
since the epoch and a date as its days since it: the same tiles, windows and state serve
them as any int column. The numbers go to a column of their own, so another aggregation of
the same column (a ``LastK`` of dates) still reads the dates. Which aggregations are
temporal is read from the type their output field is declared with, not from a batch's
values, so a batch whose column is all null answers in the same type as any other.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Literal

import numpy as np
import pandas as pd

from fennel_dagster.ops.rows import as_date, base_type
from fennel_dagster.wire import spec

Kind = Literal["datetime", "date"]
NUMBERS = "__fd_number_of_"  # the prefix of the integer column an extreme reads
_EPOCH = dt.date(1970, 1, 1)


def kinds(
    node: spec.AggregateNode, output: Mapping[str, spec.DType], df: pd.DataFrame
) -> dict[str, Kind]:
    """Each Min/Max of ``node`` over dates or datetimes (by its ``into``): its type declared
    in the pipeline's ``output`` fields; an aggregate renamed further on, by its column."""
    found: dict[str, Kind] = {}
    for a in node.aggs:
        if a.kind not in ("min", "max") or not a.of:
            continue
        kind = _kind_of(output[a.into]) if a.into in output else _kind_of_column(df, a.of)
        if kind is not None:
            found[a.into] = kind
    return found


def numbered(node: spec.AggregateNode, temporal: Mapping[str, Kind]) -> spec.AggregateNode:
    """``node`` with each temporal extreme reading its integer column: the node the state is
    written and read with (the lookups of a served aggregate rewrite it alike)."""
    if not temporal:
        return node
    aggs = tuple(
        replace(a, of=NUMBERS + a.of) if a.into in temporal and a.of is not None else a
        for a in node.aggs
    )
    return replace(node, aggs=aggs)


def as_numbers(
    node: spec.AggregateNode, df: pd.DataFrame, temporal: Mapping[str, Kind]
) -> tuple[spec.AggregateNode, pd.DataFrame]:
    """``numbered(node)``, and ``df`` with the integer columns it reads."""
    if not temporal:
        return node, df
    added: dict[str, pd.Series] = {}
    for a in node.aggs:
        kind = temporal.get(a.into)
        if kind is not None and a.of is not None and NUMBERS + a.of not in added:
            added[NUMBERS + a.of] = _numbers(df[a.of], kind)
    return numbered(node, temporal), df.assign(**added)


def answered(rows: pd.DataFrame, temporal: Mapping[str, Kind]) -> pd.DataFrame:
    """``rows`` with each temporal extreme's integers back as datetimes (UTC) or dates; a
    default (a window with no value) is left as declared."""
    for into, kind in temporal.items():
        if into in rows.columns and len(rows):
            back = [_value(v, kind) for v in rows[into].tolist()]
            rows[into] = pd.Series(back, index=rows.index, dtype=object)
    return rows


def _kind_of(dtype: spec.DType) -> Kind | None:
    base = base_type(dtype)
    if isinstance(base, spec.TimestampType):
        return "datetime"
    return "date" if isinstance(base, spec.DateType) else None


def _kind_of_column(df: pd.DataFrame, name: str) -> Kind | None:
    if name not in df.columns:
        return None
    col = df[name]
    if isinstance(col.dtype, pd.DatetimeTZDtype) or pd.api.types.is_datetime64_dtype(col.dtype):
        return "datetime"
    values = col.dropna().tolist()
    if values and all(isinstance(v, dt.date) and not isinstance(v, dt.datetime) for v in values):
        return "date"
    return None


def _numbers(col: pd.Series, kind: Kind) -> pd.Series:
    if kind == "datetime":
        stamps = pd.to_datetime(col, utc=True)
        us = stamps.array.asi8 // 1000  # type: ignore[attr-defined]
        return pd.Series(pd.array(np.where(stamps.isna(), 0, us), dtype="Int64"),
                         index=col.index).mask(stamps.isna())  # fmt: skip
    days = [
        None if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v))
        else (as_date(v) - _EPOCH).days
        for v in col.tolist()
    ]  # fmt: skip
    return pd.Series(days, index=col.index, dtype="Int64")


def _value(v: Any, kind: Kind) -> Any:
    if isinstance(v, bool) or not isinstance(v, int | np.integer):
        return v  # a default, or null
    if kind == "datetime":
        return pd.Timestamp(int(v), unit="us", tz="UTC")
    return _EPOCH + dt.timedelta(days=int(v))
