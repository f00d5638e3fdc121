"""Values in answers as Fennel's clients give them: pandas' nullable dtypes (``Int64``,
``Float64``, ``string``, ``boolean``) with ``pd.NA`` for a missing value, in a column and in
a list; a struct field's values as objects of its class (``row.window.begin``), not as the
dicts rows carry."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from fennel_dagster.declare.dtypes import as_json, decimal_of, declared_struct
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


def answer_value(value: Any, t: spec.DType) -> Any:
    """``value`` of type ``t`` as an answer holds it: each struct in it an object of its
    class, a missing value ``pd.NA``, a time in UTC."""
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return pd.NA
    match t:
        case spec.OptionalType(of=inner) | spec.BetweenType(of=inner) | spec.OneOfType(of=inner):
            return answer_value(value, inner)
        case spec.StructType(fields=fields) if isinstance(value, dict):
            cls = struct_class(t)
            return cls(**{f.name: answer_value(value.get(f.name), f.dtype) for f in fields})
        case spec.ListType(of=inner) if isinstance(value, list | tuple | np.ndarray):
            return [answer_value(v, inner) for v in value]
        case spec.MapType(of=inner) if isinstance(value, dict):
            return {k: answer_value(v, inner) for k, v in value.items()}
        case spec.TimestampType() if isinstance(value, str | dt.datetime):
            # a key echoed as given (ISO text, a naive time) is a UTC time, as stored ones are
            ts = pd.Timestamp(value)
            return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")
    return value


def holds_struct(t: spec.DType) -> bool:
    match t:
        case spec.StructType():
            return True
        case spec.OptionalType(of=inner) | spec.ListType(of=inner) | spec.MapType(of=inner):
            return holds_struct(inner)
    return False


def struct_objects(rows: pd.DataFrame, fields: Sequence[spec.FieldSpec]) -> pd.DataFrame:
    """``rows`` (a ``Dataset.lookup``'s) with each struct value an object of its class, as
    Fennel's lookups give them to the code that calls them (``role.cost``)."""
    for f in fields:
        if f.name in rows.columns and holds_struct(f.dtype):
            rows[f.name] = [answer_value(v, f.dtype) for v in rows[f.name].tolist()]
    return rows


_NULLABLE: dict[type, str] = {
    spec.IntType: "Int64",
    spec.FloatType: "Float64",
    spec.StringType: "string",
    spec.RegexType: "string",
    spec.BoolType: "boolean",
}


def answer_column(values: pd.Series, t: spec.DType) -> pd.Series:
    """A column of type ``t`` in the dtype Fennel's clients answer it in."""
    core = t
    while isinstance(core, spec.OptionalType | spec.BetweenType | spec.OneOfType):
        core = core.of
    nullable = _NULLABLE.get(type(core))
    if nullable is not None:
        try:
            return values.astype(nullable)
        except (TypeError, ValueError):
            return values  # a value its type cannot hold: left as the rows have it
    if isinstance(core, spec.TimestampType):
        return values
    if isinstance(core, spec.DecimalType):  # at its scale: 1200.1 answers Decimal('1200.10')
        return pd.Series([_or_na(decimal_of(v, core.scale)) for v in values.tolist()],
                         index=values.index, dtype=object, name=values.name)  # fmt: skip
    if isinstance(core, spec.ListType | spec.MapType | spec.StructType | spec.EmbeddingType):
        return pd.Series([answer_value(v, t) for v in values.tolist()], index=values.index,
                         dtype=object, name=values.name)  # fmt: skip
    return values


def _or_na(value: Any) -> Any:
    return pd.NA if value is None else value


def fennel_answer(data: pd.DataFrame, types: Mapping[str, spec.DType]) -> pd.DataFrame:
    """``data`` with every column of a known type as Fennel's clients answer it."""
    cols = [c for c in data.columns if c in types]
    if not cols:
        return data
    out = data.copy()
    for c in cols:
        out[c] = answer_column(data[c], types[c])
    return out
