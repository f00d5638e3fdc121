"""Normalising a batch's index, timestamps and decimals, free when they already are (the
common case: a query of one row pays for every pandas call it makes, ~20-60 µs each)."""

from __future__ import annotations

import decimal
from collections.abc import Iterable
from typing import TypeVar

import numpy as np
import pandas as pd

Frame = TypeVar("Frame", pd.DataFrame, pd.Series)
UTC_NS = pd.DatetimeTZDtype("ns", "UTC")


def positional(obj: Frame) -> Frame:
    """``obj`` indexed 0..n-1 (``reset_index(drop=True)``), itself if it already is."""
    idx = obj.index
    if isinstance(idx, pd.RangeIndex) and idx.start == 0 and idx.step == 1:
        return obj
    return obj.reset_index(drop=True)


def utc(ts: pd.Series) -> pd.Series:
    """``ts`` as nanosecond UTC timestamps indexed 0..n-1, itself if it already is."""
    if not isinstance(ts, pd.Series):
        ts = pd.Series(ts)
    if ts.dtype != UTC_NS:
        ts = pd.to_datetime(ts, utc=True)
        if ts.dtype != UTC_NS:
            ts = ts.dt.as_unit("ns")
    return positional(ts)


def decimals_as_floats(df: pd.DataFrame, columns: Iterable[str]) -> pd.DataFrame:
    """``df`` with each of ``columns`` that holds decimals as floats (None: NaN), as
    aggregations read them; a Decimal result comes back at its field's scale
    (``rows.decimal_of``), which float sums of two-digit amounts round to exactly."""
    out = df
    for c in columns:
        s = df[c]
        if s.dtype != object or not any(isinstance(v, decimal.Decimal) for v in s.tolist()):
            continue
        floats = [np.nan if v is None or v is pd.NA else float(v) for v in s.tolist()]
        out = out.assign(**{c: pd.Series(floats, index=s.index, dtype="float64")})
    return out
