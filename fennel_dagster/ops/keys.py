"""Byte layout of operator state: ``encode(key tuple) + ts + seq`` for ordered range scans.

The key prefix is JSON (which never contains a raw NUL) followed by NUL, so a key's entries
are contiguous and a prefix scan finds exactly them; the big-endian, sign-flipped
microsecond timestamp orders them in event time; the sequence number keeps several events of
one key and instant apart in arrival order.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import pandas as pd

_TS = struct.Struct(">QQ")
_FLIP = 1 << 63


def _plain(v: Any) -> Any:
    if hasattr(v, "item"):
        return v.item()
    return v


def key_prefix(values: tuple[Any, ...]) -> bytes:
    return json.dumps([_plain(v) for v in values], separators=(",", ":")).encode() + b"\0"


def micros(ts: pd.Timestamp) -> int:
    return int(ts.value // 1000)


def micros_of(ts: pd.Series) -> list[int]:
    """``[micros(t) for t in ts]`` for timestamps (any tz-aware, or naive as UTC), vectorised."""
    if not isinstance(ts.dtype, pd.DatetimeTZDtype):
        ts = pd.to_datetime(ts, utc=True)
    if ts.dtype.unit != "ns":  # type: ignore[union-attr]
        ts = ts.dt.as_unit("ns")
    return (ts.array.asi8 // 1000).tolist()  # type: ignore[union-attr,no-any-return]


def entry_key(values: tuple[Any, ...], ts_micros: int, seq: int) -> bytes:
    return key_prefix(values) + _TS.pack(ts_micros + _FLIP, seq)


def split_entry(key: bytes) -> tuple[int, int]:
    """(timestamp in microseconds, sequence) of an ``entry_key``."""
    ts, seq = _TS.unpack(key[-_TS.size :])
    return ts - _FLIP, seq


def prefix_end(prefix: bytes) -> bytes:
    return prefix[:-1] + b"\x01"
