"""Expression and aggregation typing, shared by ``infer`` and the operator rules (``infer_nodes``).

``type_of`` gives the type of an expression over a row's column types, ``agg_type`` the type of
an aggregation's output column; both raise ``TypeErrorInExpr`` when the types do not fit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from fennel_dagster.declare.dtypes import render
from fennel_dagster.errors import CommitError
from fennel_dagster.wire import spec


class TypeErrorInExpr(CommitError, ValueError):
    pass


def base(t: spec.DType) -> spec.DType:
    """The type a restriction narrows (between/oneof/regex → int/float/str)."""
    match t:
        case spec.BetweenType(of=o) | spec.OneOfType(of=o):
            return base(o)
        case spec.RegexType():
            return spec.StringType()
    return t


def optional(t: spec.DType) -> spec.DType:
    return t if isinstance(t, spec.OptionalType) else spec.OptionalType(t)


def strip_optional(t: spec.DType) -> spec.DType:
    return t.of if isinstance(t, spec.OptionalType) else t


def same_type(a: spec.DType, b: spec.DType) -> bool:
    """Equal up to restrictions (a ``between(float, ...)`` column is a float)."""
    a2, b2 = base(strip_optional(a)), base(strip_optional(b))
    if isinstance(a, spec.OptionalType) != isinstance(b, spec.OptionalType):
        return False
    if isinstance(a2, spec.ListType) and isinstance(b2, spec.ListType):
        return same_type(a2.of, b2.of)
    return a2 == b2


def _numeric(t: spec.DType) -> bool:
    return isinstance(base(strip_optional(t)), spec.IntType | spec.FloatType)


def _wrap(result: spec.DType, *args: spec.DType) -> spec.DType:
    return optional(result) if any(isinstance(a, spec.OptionalType) for a in args) else result


def type_of(e: spec.Expr, schema: Mapping[str, spec.DType]) -> spec.DType:
    match e:
        case spec.Col(name=n):
            if n not in schema:
                raise TypeErrorInExpr(f"column {n!r} does not exist (columns: {', '.join(schema)})")
            return schema[n]
        case spec.Lit(value=v, dtype=d):
            if d is not None:
                return d
            if v is None:
                return spec.OptionalType(spec.IntType())
            literal: dict[type, spec.DType] = {
                bool: spec.BoolType(),
                int: spec.IntType(),
                float: spec.FloatType(),
                str: spec.StringType(),
            }
            return literal[type(v)]
        case spec.When(cases=cases, otherwise=other):
            for c, _ in cases:
                if not isinstance(base(strip_optional(type_of(c, schema))), spec.BoolType):
                    raise TypeErrorInExpr("a when() condition is not boolean")
            types = [type_of(v, schema) for _, v in cases] + [type_of(other, schema)]
            non_null = [
                t
                for t in types
                if not (isinstance(other, spec.Lit) and other.value is None and t is types[-1])
            ]
            result = strip_optional(non_null[0])
            nullable = any(isinstance(t, spec.OptionalType) for t in types) or (
                isinstance(other, spec.Lit) and other.value is None
            )
            return optional(result) if nullable else result
        case spec.Call(fn=fn, args=args, dtype=dtype):
            ts = [type_of(a, schema) for a in args]
            return _call_type(fn, ts, dtype)
    raise TypeErrorInExpr(f"not an expression: {e!r}")


def _call_type(fn: str, ts: list[spec.DType], dtype: spec.DType | None) -> spec.DType:
    a = ts[0]
    core = base(strip_optional(a))
    if fn in ("add", "sub", "mul", "mod", "pow", "floordiv", "truediv"):
        return _arith_type(fn, ts)
    if fn in ("eq", "ne", "lt", "le", "gt", "ge", "and", "or"):
        return _wrap(spec.BoolType(), *ts)
    if fn == "not":
        return _wrap(spec.BoolType(), a)
    if fn == "neg":
        return a
    if fn == "isnull":
        return spec.BoolType()
    if fn == "fillnull":
        return strip_optional(a)
    if fn == "astype":
        if dtype is None:
            raise TypeErrorInExpr("astype without a target type")
        return (
            _wrap(strip_optional(dtype), a) if not isinstance(dtype, spec.OptionalType) else dtype
        )
    simple: dict[str, Callable[[], spec.DType]] = {
        "str.len": spec.IntType, "str.lower": spec.StringType, "str.upper": spec.StringType,
        "str.strip": spec.StringType, "str.contains": spec.BoolType, "str.startswith": spec.BoolType,
        "str.endswith": spec.BoolType, "str.concat": spec.StringType, "str.strptime": spec.TimestampType,
        "str.split": lambda: spec.ListType(spec.StringType()),
        "dt.year": spec.IntType, "dt.month": spec.IntType, "dt.day": spec.IntType,
        "dt.hour": spec.IntType, "dt.minute": spec.IntType, "dt.second": spec.IntType,
        "dt.day_of_week": spec.IntType, "dt.since": spec.IntType, "dt.since_epoch": spec.IntType,
        "dt.strftime": spec.StringType, "num.ceil": spec.IntType, "num.floor": spec.IntType,
        "num.sqrt": spec.FloatType, "num.log": spec.FloatType, "num.to_string": spec.StringType,
        "list.len": spec.IntType, "list.contains": spec.BoolType, "list.hasnull": spec.BoolType,
        "list.mean": lambda: spec.OptionalType(spec.FloatType()),
    }  # fmt: skip
    if (
        fn.startswith("str.")
        and fn not in ("str.json_extract",)
        and not isinstance(core, spec.StringType)
    ):
        raise TypeErrorInExpr(f"{fn} needs a str, got {render(a)}")
    if fn.startswith("dt.") and fn != "dt.strftime" and not isinstance(core, spec.TimestampType):
        raise TypeErrorInExpr(f"{fn} needs a datetime, got {render(a)}")
    if fn in simple:
        return _wrap(simple[fn](), *ts)
    if fn in ("num.abs", "num.round"):
        return a
    if fn in ("list.at", "list.min", "list.max") and isinstance(core, spec.ListType):
        return optional(core.of)
    if fn == "list.sum" and isinstance(core, spec.ListType):
        return _wrap(core.of, a)
    if fn == "struct.get" and isinstance(core, spec.StructType):
        return (
            spec.OptionalType(spec.IntType())
            if not core.fields
            else optional(next((f.dtype for f in core.fields), spec.IntType()))
        )
    if fn == "str.json_extract":
        return spec.OptionalType(spec.StringType())
    raise TypeErrorInExpr(f"function {fn} cannot be applied to {', '.join(render(t) for t in ts)}")


def _arith_type(fn: str, ts: list[spec.DType]) -> spec.DType:
    if not (_numeric(ts[0]) and _numeric(ts[1])):
        if fn == "sub" and all(isinstance(base(strip_optional(t)), spec.TimestampType) for t in ts):
            return _wrap(spec.IntType(), *ts)
        raise TypeErrorInExpr(f"{fn} needs numbers, got {render(ts[0])} and {render(ts[1])}")
    floats = any(isinstance(base(strip_optional(t)), spec.FloatType) for t in ts)
    result: spec.DType = spec.FloatType() if floats or fn == "truediv" else spec.IntType()
    if fn in ("truediv", "floordiv", "mod"):
        return optional(result)  # division by zero gives null
    return _wrap(result, *ts)


def agg_type(agg: spec.AggSpec, schema: Mapping[str, spec.DType]) -> spec.DType:
    of = schema.get(agg.of) if agg.of else None
    if agg.of and of is None:
        raise TypeErrorInExpr(f"aggregation '{agg.into}' reads {agg.of!r}, which is not a column")
    match agg.kind:
        case "count":
            return spec.IntType()
        case "sum":
            assert of is not None
            if not _numeric(of):
                raise TypeErrorInExpr(f"Sum of {agg.of!r} needs a number, got {render(of)}")
            return base(strip_optional(of))
        case "avg" | "stddev":
            assert of is not None
            if not _numeric(of):
                raise TypeErrorInExpr(f"{agg.kind} of {agg.of!r} needs a number, got {render(of)}")
            return (
                spec.FloatType() if agg.default is not None else spec.OptionalType(spec.FloatType())
            )
        case "min" | "max":
            assert of is not None
            t = base(strip_optional(of))
            return t if agg.default is not None else spec.OptionalType(t)
        case "quantile":
            return (
                spec.FloatType() if agg.default is not None else spec.OptionalType(spec.FloatType())
            )
        case "lastk" | "firstk" | "distinct":
            assert of is not None
            inner = base(strip_optional(of)) if agg.dropnull else of
            return spec.ListType(base(inner) if not isinstance(inner, spec.OptionalType) else inner)
    raise TypeErrorInExpr(f"unknown aggregation {agg.kind}")
