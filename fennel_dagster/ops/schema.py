"""Checks incoming rows against a dataset's schema and restrictions, row by row.

Good rows come back normalised to the platform's dtypes; each bad row comes back with the
reason (field, expected type, value), so ingestion can route it to the error topic and go on.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fennel_dagster.declare.dtypes import render, struct_fields
from fennel_dagster.ops import limits
from fennel_dagster.ops.rows import from_records, json_value, to_records
from fennel_dagster.wire import spec


@dataclass(frozen=True)
class BadRow:
    dataset: str
    reason: str
    row: dict[str, Any]


def _check(value: Any, t: spec.DType) -> str | None:
    """None if ``value`` (JSON-safe) fits ``t``, else why not."""
    if value is None:
        return None if isinstance(t, spec.OptionalType) else "is null but the field is not Optional"
    match t:
        case spec.OptionalType(of=inner):
            return _check(value, inner)
        case spec.IntType():
            ok = isinstance(value, int) and not isinstance(value, bool)
            ok = ok or (isinstance(value, float) and value.is_integer())
            return limits.int_problem(value) if ok else "is not an int"
        case spec.FloatType():
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            return limits.float_problem(value) if ok else "is not a float"
        case spec.BoolType():
            return None if isinstance(value, bool) else "is not a bool"
        case spec.StringType():
            return limits.text_problem(value) if isinstance(value, str) else "is not a str"
        case spec.BytesType():
            return None if isinstance(value, str | bytes) else "is not bytes"
        case spec.TimestampType():
            return limits.timestamp_problem(value)
        case spec.DateType():
            try:
                dt.date.fromisoformat(str(value))
                return None
            except ValueError:
                return "is not a date"
        case spec.EmbeddingType(dim=dim):
            if not isinstance(value, list):
                return "is not a list"
            return None if len(value) == dim else f"has {len(value)} values, not {dim}"
        case spec.ListType(of=inner):
            if not isinstance(value, list):
                return "is not a list"
            bad = next((r for r in (_check(v, inner) for v in value) if r), None)
            return f"has an element that {bad}" if bad else None
        case spec.MapType(of=inner):
            if not isinstance(value, dict):
                return "is not a dict"
            bad = next((r for r in (_check(v, inner) for v in value.values()) if r), None)
            return f"has a value that {bad}" if bad else None
        case spec.StructType(fields=fields):
            value = struct_fields(value) or value
            if not isinstance(value, dict):
                return "is not a struct (object)"
            for f in fields:
                bad = _check(value.get(f.name), f.dtype)
                if bad:
                    return f"field {f.name} {bad}"
            return None
        case spec.BetweenType(of=inner, min=lo, max=hi, strict_min=smin, strict_max=smax):
            bad = _check(value, inner)
            if bad:
                return bad
            below = value < lo or (smin and value == lo)
            above = value > hi or (smax and value == hi)
            return f"is outside {render(t)}" if below or above else None
        case spec.OneOfType(of=inner, options=options):
            bad = _check(value, inner)
            return bad or (None if value in options else f"is not one of {list(options)}")
        case spec.RegexType(pattern=pattern):
            if not isinstance(value, str):
                return "is not a str"
            if too_long := limits.text_problem(value):
                return too_long
            return None if re.fullmatch(pattern, value) else f"does not match regex {pattern!r}"
        case spec.DecimalType():
            return None if isinstance(value, int | float | str) else "is not a decimal"
    return None


def widened(values: pd.Series, t: spec.DType) -> pd.Series:
    """``values`` as Fennel casts a function's output to its declared type where nothing is
    lost: UTF-8 ``bytes`` for text (``base64.b64encode`` returns bytes), bools for an int
    (``df["view_time"] < 5`` for an int field). Anything else is left for the check that
    follows to name (bytes that are not UTF-8, 1.5 for an int)."""
    core = t.of if isinstance(t, spec.OptionalType) else t
    if isinstance(core, spec.IntType) and values.dtype.kind == "b":
        return values.astype(np.int64)
    if values.dtype != object:
        return values
    if isinstance(core, spec.StringType | spec.RegexType):
        if any(isinstance(v, bytes) for v in values.tolist()):
            return values.map(_utf8_text)
    elif isinstance(core, spec.IntType) and any(isinstance(v, bool) for v in values.tolist()):
        return values.map(lambda v: int(v) if isinstance(v, bool) else v)
    return values


def _utf8_text(value: Any) -> Any:
    if not isinstance(value, bytes):
        return value
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value


def misfits(values: pd.Series, t: spec.DType) -> dict[int, str]:
    """Positions of ``values`` a column of type ``t`` cannot hold, and why: what a user
    function returned for an ``assign`` is checked before it is cast, so 1.5 for an int field
    is an error row, never a silent 1. A column whose dtype already fits is not walked."""
    core = t.of if isinstance(t, spec.OptionalType) else t
    kind = values.dtype.kind
    fits = (
        (isinstance(core, spec.IntType) and kind in "iu")
        or (isinstance(core, spec.FloatType) and kind in "iu")
        or (isinstance(core, spec.FloatType) and kind == "f" and not np.isinf(values).any())
        or (isinstance(core, spec.BoolType) and kind == "b")
    )
    if fits and not (values.isna().any() and not isinstance(t, spec.OptionalType)):
        return {}
    if isinstance(core, spec.IntType) and kind == "f":  # floats for an int field: as Fennel,
        return {i: f"{v!r} (a float) is not an int"  # a type error, even for 5.0
                for i, v in enumerate(values.tolist()) if not pd.isna(v)}  # fmt: skip
    out = {}
    for i, v in enumerate(values.tolist()):
        problem = _check(json_value(v), t)
        if problem:
            out[i] = f"{v!r} {problem}"
    return out


def held_as_declared(ds: spec.DatasetSpec, df: pd.DataFrame) -> bool:
    """Whether every row of ``df`` fits ``ds`` by its columns' dtypes alone, so that
    ``check_rows`` would find no bad row and its records would equal ``to_records(df)``: each
    field a column of its own kind (an int field ints, a float field finite floats, a bool
    field bools, a timestamp field tz-aware times in range, a text field short strings),
    nulls only where Optional. Anything else (restrictions, nested types) is walked."""
    return all(f.name in df.columns and _as_declared(df[f.name], f.dtype) for f in ds.fields)


def _as_declared(col: pd.Series, t: spec.DType) -> bool:
    optional = isinstance(t, spec.OptionalType)
    core = t.of if optional else t  # type: ignore[union-attr]
    nulls = col.isna()
    if not optional and nulls.any():
        return False
    kind = col.dtype.kind
    if kind == "O" and isinstance(core, spec.IntType | spec.FloatType | spec.BoolType):
        # an operator's Python values (an aggregate's), each of the field's own type: an int
        # in a float field is walked, as it is written "3", not "3.0"
        values = col[~nulls].tolist()
        if isinstance(core, spec.IntType):
            return all(type(v) is int and limits.int_problem(v) is None for v in values)
        if isinstance(core, spec.FloatType):
            return all(type(v) is float and math.isfinite(v) for v in values)
        return all(type(v) is bool for v in values)
    match core:
        case spec.IntType():
            return kind == "i"
        case spec.FloatType():
            return kind == "f" and not np.isinf(col.to_numpy(dtype=float, na_value=np.nan)).any()
        case spec.BoolType():
            return kind == "b"
        case spec.TimestampType():
            if not isinstance(col.dtype, pd.DatetimeTZDtype):
                return False
            present = col[~nulls]
            return present.empty or (
                present.min() >= limits.LOWEST and present.max() < limits.HIGHEST
            )
        case spec.StringType():
            return kind == "O" and all(
                isinstance(v, str) and len(v) <= limits.MAX_TEXT_CHARS for v in col[~nulls].tolist()
            )
    return False


def check_rows(ds: spec.DatasetSpec, df: pd.DataFrame) -> tuple[pd.DataFrame, list[BadRow]]:
    """Split ``df`` into the rows that fit ``ds`` (normalised) and the ones that don't."""
    missing = [
        f.name
        for f in ds.fields
        if f.name not in df.columns and not isinstance(f.dtype, spec.OptionalType)
    ]
    records = to_records(df, [c for c in df.columns])
    good: list[dict[str, Any]] = []
    bad: list[BadRow] = []
    for rec in records:
        if missing:
            bad.append(BadRow(ds.name, f"missing field(s) {', '.join(missing)}", rec))
            continue
        reason = None
        for f in ds.fields:
            why = _check(rec.get(f.name), f.dtype)
            if why:
                reason = f"{ds.name}.{f.name} = {json_value(rec.get(f.name))!r} {why} (declared {render(f.dtype)})"
                break
        if reason:
            bad.append(BadRow(ds.name, reason, rec))
        else:
            good.append(rec)
    return from_records(good, ds.fields), bad
