"""JSON in and out of the HTTP and GraphQL APIs: rows or columns to typed DataFrames and back.

Accepts what Fennel's client sends (``to_columnar_json``: ``{column: [values]}``, datetimes as
epoch milliseconds) and a list of row objects; every value is checked against the declared
type of its feature or field, and a misfit is a ``BadRequest`` naming it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

from fennel_dagster.errors import QueryError
from fennel_dagster.ops.keys import micros_of
from fennel_dagster.ops.rows import base_type, json_column, json_value, typed_series
from fennel_dagster.wire import spec

MAX_ROWS = 100_000


class BadRequest(QueryError, ValueError):
    """Input that does not fit the API or the declared types: answered 400."""


class NotFound(QueryError, LookupError):
    """A thing the request names that does not exist (an offline query id): answered 404."""


def columns(data: Any, what: str) -> dict[str, list[Any]]:
    """``{column: [values]}`` from columnar or row-oriented JSON, all columns one length."""
    if isinstance(data, list):
        if not all(isinstance(r, dict) for r in data):
            raise BadRequest(f"{what}: rows must be JSON objects ({{column: value}})")
        names = list(dict.fromkeys(k for r in data for k in r))
        data = {n: [r.get(n) for r in data] for n in names}
    if not isinstance(data, dict):
        raise BadRequest(f"{what}: expected {{column: [values]}} or a list of row objects")
    out: dict[str, list[Any]] = {}
    for name, values in data.items():
        if not isinstance(values, list):
            raise BadRequest(f"{what}: column {name!r} must be a list of values")
        out[str(name)] = values
    lengths = {len(v) for v in out.values()}
    if len(lengths) > 1:
        raise BadRequest(f"{what}: columns have different lengths {sorted(lengths)}")
    if lengths and max(lengths) > MAX_ROWS:
        raise BadRequest(f"{what}: at most {MAX_ROWS} rows per request; split the request")
    return out


def typed_column(values: list[Any], dtype: spec.DType, name: str) -> pd.Series:
    """``values`` as the platform's pandas column for ``dtype``; a misfit names ``name``."""
    try:
        base = base_type(dtype)
        if isinstance(base, spec.TimestampType):
            values = [pd.Timestamp(v, unit="ms", tz="UTC") if isinstance(v, int | float)
                      and not isinstance(v, bool) else v for v in values]  # fmt: skip
            return pd.Series(pd.to_datetime(values, utc=True, format="mixed"))
        _check(values, base, dtype)
        return typed_series(values, dtype)
    except BadRequest as e:
        raise BadRequest(f"{name}: {e}") from None
    except (TypeError, ValueError, OverflowError) as e:
        raise BadRequest(f"{name}: values do not fit its type {_type_name(dtype)} ({e})") from None


def _check(values: list[Any], base: spec.DType, dtype: spec.DType) -> None:
    optional = isinstance(dtype, spec.OptionalType)
    wants: tuple[type, ...] | None = {
        spec.IntType: (int,), spec.FloatType: (int, float), spec.BoolType: (bool,),
        spec.StringType: (str,),
    }.get(type(base))  # fmt: skip
    for v in values:
        if v is None:
            if not optional:
                raise BadRequest(f"null given but its type {_type_name(dtype)} is not Optional")
            continue
        if wants is None:
            continue
        if isinstance(v, bool) and bool not in wants:
            raise BadRequest(f"expected {_type_name(dtype)}, got {v!r}")
        if not isinstance(v, wants):
            raise BadRequest(f"expected {_type_name(dtype)}, got {json_value(v)!r}")
        if isinstance(base, spec.IntType) and isinstance(v, int) and abs(v) >= 2**63:
            raise BadRequest(f"{v} does not fit a 64-bit int")


def _type_name(dtype: spec.DType) -> str:
    return type(base_type(dtype)).__name__.removesuffix("Type").lower()


def frame(
    data: Mapping[str, list[Any]], types: Mapping[str, spec.DType], what: str
) -> pd.DataFrame:
    """The typed frame of ``data``; every column must be in ``types``."""
    unknown = [c for c in data if c not in types]
    if unknown:
        raise BadRequest(f"{what}: unknown column(s) {', '.join(unknown)}")
    return pd.DataFrame({c: typed_column(v, types[c], c) for c, v in data.items()})


def json_inputs(
    data: Mapping[str, list[Any]],
    types: Mapping[str, spec.DType],
    casts: Mapping[str, Callable[[Any], Any]],
    what: str,
) -> dict[str, list[Any]]:
    """``frame``'s checks and messages without the frame, for columns of the JSON-native
    types ``casts`` covers: each value as JSON of its declared type (an int given for a
    float, a float)."""
    unknown = [c for c in data if c not in types]
    if unknown:
        raise BadRequest(f"{what}: unknown column(s) {', '.join(unknown)}")
    out = {}
    for c, values in data.items():
        dtype = types[c]
        try:
            _check(values, base_type(dtype), dtype)
        except BadRequest as e:
            raise BadRequest(f"{c}: {e}") from None
        cast = casts[c]
        out[c] = [cast(v) for v in values]
    return out


def timestamp_micros(values: Any, n: int, what: str) -> list[int]:
    """``timestamps`` as µs since the epoch."""
    if values is None:
        return [time.time_ns() // 1000] * n
    return micros_of(timestamps(values, n, what))


def timestamps(values: Any, n: int, what: str) -> pd.Series:
    """Per-row timestamps (ISO strings or epoch ms); None: now for every row."""
    if values is None:
        return pd.Series([pd.Timestamp.now(tz="UTC")] * n)
    if not isinstance(values, list) or len(values) != n:
        raise BadRequest(f"{what}: timestamps must be a list with one value per row ({n})")
    return typed_column(values, spec.TimestampType(), "timestamps")


def to_json_columns(df: pd.DataFrame) -> dict[str, list[Any]]:
    """Columnar JSON values of ``df``: NaN and NA as null, datetimes as ISO strings."""
    return {str(c): json_column(df[c]) for c in df.columns}
