"""Normalising a batch's index and timestamps, free when they already are (the common case:
a query of one row pays for every pandas call it makes, ~20-60 µs each)."""

from __future__ import annotations

from typing import TypeVar

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
