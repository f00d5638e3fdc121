"""Struct values in answers: a lookup gives a struct field's values as objects of its class
(``row.window.begin``), as Fennel's lookups do, not as the dicts rows carry."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

import pandas as pd

from fennel_dagster.declare.dtypes import as_json, declared_struct
from fennel_dagster.wire import spec

_MADE: dict[spec.StructType, type] = {}


def struct_class(t: spec.StructType) -> type:
    """The class declared under the type's name with its fields; else one made from the type
    (a client that never imported the declaration still answers objects)."""
    names = [f.name for f in t.fields]
    cls = declared_struct(t.name)
    if cls is not None and [f.name for f in dataclasses.fields(cls)] == names:
        return cls
    if t not in _MADE:
        made = dataclasses.make_dataclass(t.name, [(n, Any) for n in names])
        made.as_json = as_json  # type: ignore[attr-defined]
        _MADE[t] = made
    return _MADE[t]


def holds_struct(t: spec.DType) -> bool:
    match t:
        case spec.StructType():
            return True
        case spec.OptionalType(of=inner) | spec.ListType(of=inner) | spec.MapType(of=inner):
            return holds_struct(inner)
    return False


def struct_value(value: Any, t: spec.DType) -> Any:
    """``value`` with each struct in it (a dict of fields) as an object of its class."""
    if value is None or value is pd.NA:
        return value
    match t:
        case spec.OptionalType(of=inner):
            return struct_value(value, inner)
        case spec.StructType(fields=fields) if isinstance(value, dict):
            cls = struct_class(t)
            return cls(**{f.name: struct_value(value.get(f.name), f.dtype) for f in fields})
        case spec.ListType(of=inner) if isinstance(value, list | tuple):
            return [struct_value(v, inner) for v in value]
        case spec.MapType(of=inner) if isinstance(value, dict):
            return {k: struct_value(v, inner) for k, v in value.items()}
        case spec.TimestampType() if isinstance(value, str | dt.datetime):
            # a key echoed as given (ISO text, a naive time) is a UTC time, as stored ones are
            ts = pd.Timestamp(value)
            return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")
    return value


def with_struct_objects(data: pd.DataFrame, types: Mapping[str, spec.DType]) -> pd.DataFrame:
    """``data`` with the columns whose type holds a struct as objects of their classes."""
    cols = [c for c in data.columns if c in types and holds_struct(types[c])]
    if not cols:
        return data
    out = data.copy()
    for c in cols:
        out[c] = pd.Series([struct_value(v, types[c]) for v in data[c].tolist()],
                           index=data.index, dtype=object)  # fmt: skip
    return out
