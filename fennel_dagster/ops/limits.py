"""The values the operators can hold: what a parser may let through to them.

A value outside these bounds is a bad row (an error record naming the field), never an
exception inside an operator: one hostile event must not stop a partition. The bounds are
those of the engine's representations — int64 integers, finite float64, timestamps as
nanoseconds since the epoch (pandas' range, 1677-09-22 … 2262-04-11) — plus a size limit
on text so a row always fits a Kafka message.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import pandas as pd

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
# a row must fit a message of the dataset topic (MAX_ROW_BYTES); one text value may take
# a quarter of it, so a row of several long strings still fits
MAX_ROW_BYTES = 1_000_000
# topic limits set at commit (not left to broker defaults), with room for the record batch
# around the largest row or error record
DATASET_TOPIC_MAX_BYTES = 2 * 1024 * 1024
ERROR_TOPIC_MAX_BYTES = 2 * 1024 * 1024
ERROR_RECORD_MAX_BYTES = 1_000_000
MAX_TEXT_CHARS = 256 * 1024
LOWEST = pd.Timestamp("1677-09-22", tz="UTC")
HIGHEST = pd.Timestamp("2262-04-11", tz="UTC")


def int_problem(value: int | float) -> str | None:
    """Why an integral value cannot be an int64, or None."""
    if INT64_MIN <= value <= INT64_MAX:
        return None
    return (
        f"is beyond int64 ({INT64_MIN} … {INT64_MAX}); an int field holds int64: declare it "
        "float if its values (or their Sum) grow this large"
    )


def float_problem(value: int | float) -> str | None:
    if isinstance(value, int):
        try:
            float(value)
        except OverflowError:
            return "is beyond float64"
        return None
    if math.isfinite(value):
        return None
    return "is not a finite number (NaN/Infinity); send null and declare the field Optional"


def text_problem(value: str) -> str | None:
    if len(value) <= MAX_TEXT_CHARS:
        return None
    return (
        f"is {len(value):,} characters long, over the limit of {MAX_TEXT_CHARS:,}; store big "
        "blobs elsewhere (e.g. S3) and send a reference"
    )


def parse_timestamp(value: Any) -> pd.Timestamp:
    """A JSON-safe timestamp (ISO text, an epoch number, datetime) as a UTC Timestamp.

    Raises ValueError/TypeError/OverflowError for text that is not a time; the result may
    still be outside the representable range (see ``timestamp_problem``). Text and numbers
    are remembered: callers check a value, then read it (``typed``: 1, 1.0 and True are
    different keys)."""
    if isinstance(value, str | int | float):
        return _parse_remembered(value)
    return _parse(value)


@functools.lru_cache(maxsize=1 << 14, typed=True)
def _parse_remembered(value: str | int | float) -> pd.Timestamp:
    return _parse(value)


def _parse(value: Any) -> pd.Timestamp:
    if isinstance(value, bool):
        raise TypeError("a bool is not a time")
    ts = _from_epoch(value) if isinstance(value, int | float) else pd.Timestamp(value)
    if ts is pd.NaT:
        raise ValueError("NaT")
    return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")


# nanoseconds per unit, coarsest first: an epoch number is read in the first unit that keeps
# it within pandas' nanosecond range (seconds up to 2262, then ms, µs, ns), as Fennel reads one
_EPOCH_UNITS = (("s", 10**9), ("ms", 10**6), ("us", 10**3), ("ns", 1))
_NS_MAX = 2**63 - 1


def _from_epoch(value: int | float) -> pd.Timestamp:
    """An epoch number as a time: seconds, or, where seconds would pass 2262, milliseconds,
    microseconds or nanoseconds (1672858163000 is 2023-01-04 in ms)."""
    for unit, ns in _EPOCH_UNITS:
        if abs(value) * ns <= _NS_MAX:
            return pd.Timestamp(value, unit=unit)
    raise OverflowError(f"{value!r} is beyond any epoch unit's range")


def timestamp_problem(value: Any) -> str | None:
    """Why ``value`` is not a timestamp the operators can hold, or None."""
    try:
        ts = parse_timestamp(value)
    except (ValueError, TypeError, OverflowError):
        return "is not a datetime"
    if LOWEST <= ts < HIGHEST:
        return None
    return (
        f"is outside the range of timestamps the platform stores ({LOWEST.date()} … "
        f"{HIGHEST.date()}); a wrong unit (ms/µs sent as seconds) or a bad clock?"
    )
