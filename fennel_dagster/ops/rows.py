"""Rows <-> JSON-safe records, typed by a dataset schema (the value format of state and topics)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import orjson
import pandas as pd

from fennel_dagster.declare.dtypes import decimal_of, struct_fields
from fennel_dagster.ops.limits import parse_timestamp
from fennel_dagster.wire import spec


def base_type(t: spec.DType) -> spec.DType:
    """A dtype without its Optional / restriction wrappers."""
    while isinstance(t, spec.OptionalType | spec.BetweenType | spec.OneOfType):
        t = t.of
    return t


def json_value(v: Any) -> Any:
    if v is None:
        return None
    if (fields := struct_fields(v)) is not None:
        return {k: json_value(x) for k, x in fields.items()}
    if isinstance(v, pd.Timestamp):
        return (
            None
            if pd.isna(v)
            else v.tz_convert("UTC").isoformat()
            if v.tzinfo
            else v.tz_localize("UTC").isoformat()
        )
    if isinstance(v, dt.datetime):
        return (v if v.tzinfo else v.replace(tzinfo=dt.UTC)).isoformat()
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, np.ndarray | list | tuple):
        return [json_value(x) for x in v]
    if isinstance(v, dict):
        return {str(k): json_value(x) for k, x in v.items()}
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and v != v:
        return None
    if v is pd.NA or v is pd.NaT:
        return None
    return v


def json_column(col: pd.Series) -> list[Any]:
    """``[json_value(v) for v in col]``, vectorised for the common dtypes (same output)."""
    dtype = col.dtype
    if isinstance(dtype, pd.DatetimeTZDtype) or dtype.kind == "M":
        utc = col.dt.tz_convert("UTC") if getattr(dtype, "tz", None) else col.dt.tz_localize("UTC")
        ns = utc.to_numpy(dtype="datetime64[ns]")
        valid = ~np.isnat(ns)
        if (ns.view("int64")[valid] % 1000).any():
            return [json_value(v) for v in col.tolist()]
        text = np.datetime_as_string(ns.astype("datetime64[us]"), unit="us")
        out: list[Any] = []
        for t, ok in zip(text.tolist(), valid.tolist(), strict=True):
            if not ok:
                out.append(None)
            else:
                out.append((t[:-7] if t.endswith(".000000") else t) + "+00:00")
        return out
    if dtype.kind in "iub" and not col.hasnans:
        return col.tolist()
    if isinstance(dtype, pd.Int64Dtype | pd.BooleanDtype | pd.Float64Dtype):  # pd.NA: null
        return [json_value(v) for v in col.astype(object).where(col.notna(), None).tolist()]
    if dtype.kind == "f":
        values = col.tolist()
        return [None if v != v else v for v in values]
    return [json_value(v) for v in col.tolist()]


def to_records(df: pd.DataFrame, columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
    cols = list(columns) if columns is not None else list(df.columns)
    data = [json_column(df[c]) for c in cols]
    return (
        [dict(zip(cols, row, strict=True)) for row in zip(*data, strict=True)]
        if cols
        else [{} for _ in range(len(df))]
    )


def from_records(
    records: Iterable[dict[str, Any]], fields: Sequence[spec.FieldSpec]
) -> pd.DataFrame:
    return pd.DataFrame(typed_columns(records, fields))


def typed_columns(
    records: Iterable[dict[str, Any]], fields: Sequence[spec.FieldSpec]
) -> dict[str, pd.Series]:
    """``from_records`` as a column per field, without the frame (a few records: it costs
    as much as the columns)."""
    recs = list(records)
    return {f.name: typed_series([r.get(f.name) for r in recs], f.dtype) for f in fields}


def typed_series(values: list[Any], dtype: spec.DType) -> pd.Series:
    base = base_type(dtype)
    match base:
        case spec.TimestampType():
            if any(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
                # epoch numbers (seconds, or ms/µs/ns past 2262), as the schema check takes them
                values = [None if v is None else parse_timestamp(v) for v in values]
            return pd.Series(
                pd.to_datetime(values, utc=True, format="ISO8601"), dtype="datetime64[ns, UTC]"
            )
        case spec.DateType():
            return pd.Series(
                [
                    None if v is None else dt.date.fromisoformat(v) if isinstance(v, str) else v
                    for v in values
                ],
                dtype=object,
            )
        case spec.IntType():
            # a float that is no int (NaN, inf, 1.5) fails the cast with a TypeError; numpy's
            # "invalid value" warning on the way says nothing more
            with np.errstate(invalid="ignore"):
                return pd.Series(values, dtype="Int64")
        case spec.FloatType():
            return pd.Series([np.nan if v is None else float(v) for v in values], dtype="float64")
        case spec.BoolType():
            return pd.Series(values, dtype="boolean")
        case spec.DecimalType(scale=scale):
            return pd.Series([decimal_of(v, scale) for v in values], dtype=object)
        case spec.ListType(of=item) if isinstance(base_type(item), _TIMES):
            # items as their type, not the JSON text a row or an aggregate's events hold
            return pd.Series([[_time_item(x, item) for x in v] if _listed(v) else v
                              for v in values], dtype=object)  # fmt: skip
    return pd.Series(values, dtype=object)


_TIMES = (spec.DateType, spec.TimestampType)


def _listed(v: Any) -> bool:
    return isinstance(v, list | tuple | np.ndarray)


def _time_item(v: Any, dtype: spec.DType) -> Any:
    """One item of a list of dates or datetimes, from its JSON text or as it is."""
    if v is None or v is pd.NA or v is pd.NaT:
        return None
    if isinstance(base_type(dtype), spec.DateType):
        return as_date(v)
    return parse_timestamp(v)


def as_date(v: Any) -> dt.date:
    """A date from a date, a datetime (its day) or ISO text."""
    if isinstance(v, dt.datetime):
        return v.date()
    if isinstance(v, dt.date):
        return v
    return dt.date.fromisoformat(str(v))


def normalise(df: pd.DataFrame, fields: Sequence[spec.FieldSpec]) -> pd.DataFrame:
    """``df`` with exactly ``fields`` as columns, in the platform's pandas dtypes."""
    return from_records(to_records(df, [f.name for f in fields]), fields)


_ENCODER = json.JSONEncoder(separators=(",", ":"), sort_keys=True)


def dumps(record: dict[str, Any]) -> bytes:
    """Canonical JSON bytes (sorted keys, no spaces): the same row always encodes the same."""
    return _ENCODER.encode(record).encode()


# every ASCII digit as "0", every other byte as a space: a run of digits is then a substring
_DIGITS_AS_ZERO = bytes(48 if 48 <= c <= 57 else 32 for c in range(256))
_RUN = b"0" * 19


def long_digit_run(data: bytes) -> bool:
    """Whether ``data`` holds 19 ASCII digits in a row: an int that may be beyond int64, which
    orjson would read as a float. A translation and a substring search, both in C: a regular
    expression tries every position in Python's engine, 30x slower over a batch."""
    return _RUN in data.translate(_DIGITS_AS_ZERO)


def loads(data: bytes) -> dict[str, Any]:
    """A row from its JSON bytes: orjson (these rows are decoded at every stage, and by the
    offline writers), and the standard library for what orjson refuses or reads otherwise:
    the NaN and Infinity ``dumps`` writes, and ints beyond 64 bits."""
    if not long_digit_run(data):
        try:
            return orjson.loads(data)  # type: ignore[no-any-return]
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)  # type: ignore[no-any-return]


def content_seq(record: dict[str, Any]) -> int:
    """A deterministic tie-breaker for several rows of one key at one instant."""
    return seq_of(dumps(record))


def seq_of(encoded: bytes) -> int:
    """``content_seq`` of a row already encoded by ``dumps``."""
    return zlib.crc32(encoded)
