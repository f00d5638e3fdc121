"""IR expressions compiled to native Spark Columns: the batch twin of ``ops/expr.py``.

Same registry of ``Call.fn``, same semantics: nulls propagate as in SQL, division by zero
gives null, ``%`` takes the divisor's sign (Python's rule, not Java's), ``round`` rounds
half to even, ``day_of_week`` counts Monday as 0, ``log`` of 0 is -inf and of a negative
number NaN. Everything is a Spark expression: no Python UDF runs per row. The functions
Spark cannot match exactly are refused with ``SparkUnsupported`` (``str.json_extract``
returns typed JSON values in pandas but text in Spark), never approximated silently.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention
from pyspark.sql import types as T  # noqa: N812

from fennel_dagster.errors import ExecutionError
from fennel_dagster.ops.expr import CALENDAR_UNITS, FUNCTIONS
from fennel_dagster.wire import spec


class SparkUnsupported(ExecutionError, ValueError):
    """An expression the Spark executor cannot compute with the engine's exact semantics."""


_UNIT = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 7 * 86400,
         "millisecond": 1e-3, "microsecond": 1e-6}  # fmt: skip

# strftime/strptime codes -> Java DateTimeFormatter letters (the subset both sides agree on)
_FORMAT = {"%Y": "yyyy", "%m": "MM", "%d": "dd", "%H": "HH", "%M": "mm", "%S": "ss",
           "%f": "SSSSSS", "%j": "DDD", "%b": "MMM", "%B": "MMMM", "%a": "EEE", "%A": "EEEE",
           "%z": "xx", "%%": "%"}  # fmt: skip


def java_pattern(fmt: str) -> str:
    """A Python ``strftime`` format as a Java pattern, literal text quoted."""
    out: list[str] = []
    for token in re.split(r"(%.)", fmt):
        if not token:
            continue
        if token.startswith("%") and len(token) == 2:
            if token not in _FORMAT:
                raise SparkUnsupported(
                    f"format code {token} has no Spark equivalent; use one of {', '.join(_FORMAT)}"
                )
            out.append(_FORMAT[token])
        else:
            out.append("'" + token.replace("'", "''") + "'")
    return "".join(out)


def spark_type(dtype: spec.DType) -> T.DataType:
    """The Spark type a platform dtype is held in."""
    match dtype:
        case spec.IntType():
            return T.LongType()
        case spec.FloatType():
            return T.DoubleType()
        case spec.BoolType():
            return T.BooleanType()
        case spec.StringType() | spec.RegexType():
            return T.StringType()
        case spec.BytesType():
            return T.BinaryType()
        case spec.TimestampType():
            return T.TimestampType()
        case spec.DateType():
            return T.DateType()
        case spec.DecimalType(scale=scale):
            return T.DecimalType(38, scale)
        case spec.OptionalType(of=inner) | spec.BetweenType(of=inner) | spec.OneOfType(of=inner):
            return spark_type(inner)
        case spec.ListType(of=inner):
            return T.ArrayType(spark_type(inner))
        case spec.MapType(of=inner):
            return T.MapType(T.StringType(), spark_type(inner))
        case spec.EmbeddingType():
            return T.ArrayType(T.DoubleType())
        case spec.StructType(fields=fields):
            return T.StructType([T.StructField(f.name, spark_type(f.dtype)) for f in fields])
    raise SparkUnsupported(f"no Spark type for {dtype!r}")


def _lit(node: spec.Lit) -> Column:
    value: Any = node.value
    if isinstance(node.dtype, spec.TimestampType) and isinstance(value, str):
        moment = dt.datetime.fromisoformat(value).astimezone(dt.UTC)
        return F.timestamp_micros(F.lit(_epoch_micros(moment)))
    if isinstance(node.dtype, spec.DateType) and isinstance(value, str):
        return F.lit(dt.date.fromisoformat(value[:10]))
    return F.lit(value)


def _epoch_micros(moment: dt.datetime) -> int:
    delta = moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def _param(node: spec.Expr) -> Any:
    if not isinstance(node, spec.Lit):
        raise SparkUnsupported(f"expected a literal parameter, got {node!r}")
    return node.value


def _python_mod(a: Column, b: Column) -> Column:
    r = F.try_mod(a, b)
    return F.when((r != 0) & ((r < 0) != (b < 0)), r + b).otherwise(r)


def _floordiv(a: Column, b: Column) -> Column:
    return F.when(b != 0, F.floor(a / b))


def _log(s: Column) -> Column:
    x = s.cast("double")
    return (
        F.when(x > 0, F.ln(x))
        .when(x == 0, F.lit(float("-inf")))
        .when(x.isNotNull(), F.lit(float("nan")))
    )


def _seconds(s: Column) -> Column:
    return F.unix_micros(s) / 1_000_000


def _since(a: Column, b: Column, unit: str) -> Column:
    """``ops.expr._since`` on Spark: floored units, calendar months and years."""
    if unit not in CALENDAR_UNITS:
        return F.floor((_seconds(a) - _seconds(b)) / _UNIT[unit])
    months = (F.year(a) - F.year(b)) * 12 + (F.month(a) - F.month(b))
    months = months - F.when(_rest_of_month(a) < _rest_of_month(b), 1).otherwise(0)
    return F.floor(months / CALENDAR_UNITS[unit])


def _rest_of_month(s: Column) -> Column:
    day_us = 86_400_000_000
    return F.dayofmonth(s).cast("long") * day_us + F.pmod(F.unix_micros(s), F.lit(day_us))


def _strptime(s: Column, params: list[Any]) -> Column:
    local = F.to_timestamp(s, java_pattern(params[0]))
    tz = params[1] if len(params) > 1 else "UTC"
    return local if tz == "UTC" else F.to_utc_timestamp(local, tz)


def _list_sum(s: Column) -> Column:
    return F.aggregate(s, F.lit(0).cast("double"), lambda acc, x: acc + x)


def _strip(s: Column) -> Column:
    return F.regexp_replace(s, r"^\s+|\s+$", "")


def _wall(s: Column, p: list[Any], at: int) -> Column:
    """The instant shifted to the wall clock of the zone in parameter ``at`` (``dt.with_tz``):
    the session renders timestamps in UTC, so parts of the shifted value are local parts."""
    return F.from_utc_timestamp(s, p[at]) if len(p) > at else s


def _round(s: Column, decimals: int) -> Column:
    """``round()`` an int, ``round(n)`` a float with ``n`` decimals (half to even)."""
    if decimals == 0:
        return F.bround(s.cast("double"), 0).cast("long")
    return F.bround(s.cast("double"), decimals)


def _has_null(s: Column) -> Column:
    return F.exists(s, lambda x: x.isNull())


def _contains(s: Column, item: Column) -> Column:
    """As ``ops.expr._contains``: an empty list contains nothing (not even null); otherwise
    Spark's ``array_contains`` (null if the item, or an element not matched, is null)."""
    return F.when(F.size(s) == 0, F.lit(False)).when(item.isNotNull(), F.array_contains(s, item))


_INT_TYPES = ("tinyint", "smallint", "int", "bigint")


def _pow(a: Column, b: Column) -> Column:
    """Spark's ``pow`` is a float power; an int to a negative int power is an error (as on
    pandas), found from the operands' SQL types at run time."""
    ints = F.typeof(a).isin(*_INT_TYPES) & F.typeof(b).isin(*_INT_TYPES)
    message = (
        "pow: an int raised to a negative int power has no int value; make the base or the "
        "exponent a float, e.g. lit(2).num.pow(lit(-2.0))"
    )
    return F.when(ints & (b < 0), F.raise_error(F.lit(message))).otherwise(F.pow(a, b))


def _struct(given: Mapping[str, Column], dtype: spec.StructType) -> Column:
    """A struct of ``dtype`` from its fields' columns (a field not given is null)."""
    return F.struct(*[
        (given[f.name] if f.name in given else F.lit(None)).cast(spark_type(f.dtype)).alias(f.name)
        for f in dtype.fields
    ])  # fmt: skip


def _zip(names: list[str], lists: list[Column], dtype: spec.StructType) -> Column:
    """As ``ops.expr._zip``: structs of the lists' items up to the shortest list (Spark's
    ``arrays_zip`` pads to the longest, so the items are read by position instead)."""
    given = dict(zip(names, lists, strict=True))
    shortest = F.least(*(F.size(c) for c in lists)) if len(lists) > 1 else F.size(lists[0])

    def item(k: Column) -> Column:
        return _struct({name: c[k] for name, c in given.items()}, dtype)

    present = F.lit(True)
    for c in lists:
        present = present & c.isNotNull()
    return F.when(present, F.transform(F.slice(lists[0], 1, shortest), lambda _, k: item(k)))


def _parse(s: Column, dtype: spec.DType) -> Column:
    """``str.parse``: JSON text read with ``from_json`` in FAILFAST mode (bad JSON fails the
    query, as it raises on pandas); the value is wrapped in an object so any type parses."""
    doc = F.concat(F.lit('{"v":'), s, F.lit("}"))
    schema = T.StructType([T.StructField("v", spark_type(dtype))])
    value = F.from_json(doc, schema, {"mode": "FAILFAST"}).getField("v")
    if isinstance(dtype, spec.OptionalType):
        dtype = dtype.of
    if isinstance(dtype, spec.StringType):  # Spark would read a number or a list as its text
        text = F.trim(s)
        quoted = text.startswith('"') | (text == "null")
        message = F.concat(F.lit("str.parse: "), s, F.lit(" is not a JSON string (quote it)"))
        return F.when(s.isNotNull() & ~quoted, F.raise_error(message)).otherwise(value)
    return value


_UNARY: dict[str, Callable[[Column, list[Any]], Column]] = {
    "str.len": lambda s, p: F.length(s),
    "str.lower": lambda s, p: F.lower(s),
    "str.upper": lambda s, p: F.upper(s),
    "str.strip": lambda s, p: _strip(s),
    "str.contains": lambda s, p: s.contains(p[0]),
    "str.startswith": lambda s, p: s.startswith(p[0]),
    "str.endswith": lambda s, p: s.endswith(p[0]),
    "str.split": lambda s, p: F.split(s, "\\Q" + p[0] + "\\E", -1),
    "str.strptime": _strptime,
    "dt.year": lambda s, p: F.year(_wall(s, p, 0)),
    "dt.month": lambda s, p: F.month(_wall(s, p, 0)),
    "dt.day": lambda s, p: F.dayofmonth(_wall(s, p, 0)),
    "dt.hour": lambda s, p: F.hour(_wall(s, p, 0)),
    "dt.minute": lambda s, p: F.minute(_wall(s, p, 0)),
    "dt.second": lambda s, p: F.second(_wall(s, p, 0)),
    "dt.day_of_week": lambda s, p: (F.dayofweek(_wall(s, p, 0)) + 5) % 7,
    "dt.since_epoch": lambda s, p: _since(s, F.timestamp_micros(F.lit(0)), p[0] if p else "second"),
    "dt.strftime": lambda s, p: F.date_format(_wall(s, p, 1), java_pattern(p[0])),
    "num.abs": lambda s, p: F.abs(s),
    "num.ceil": lambda s, p: F.ceil(s),
    "num.floor": lambda s, p: F.floor(s),
    "num.from_epoch": lambda s, p: F.timestamp_micros(s * round(_UNIT[p[0]] * 1_000_000)),
    "num.round": lambda s, p: _round(s, int(p[0]) if p else 0),
    "num.sqrt": lambda s, p: F.sqrt(s.cast("double")),
    "num.log": lambda s, p: _log(s) / F.lit(math.log(p[0])) if p else _log(s),
    "num.sin": lambda s, p: F.sin(s.cast("double")),
    "num.cos": lambda s, p: F.cos(s.cast("double")),
    "num.tan": lambda s, p: F.tan(s.cast("double")),
    "num.arcsin": lambda s, p: F.asin(s.cast("double")),
    "num.arccos": lambda s, p: F.acos(s.cast("double")),
    "num.arctan": lambda s, p: F.atan(s.cast("double")),
    "num.to_string": lambda s, p: s.cast("string"),
    "list.len": lambda s, p: F.size(s),
    "list.contains": lambda s, p: _contains(s, F.lit(p[0])),
    "list.at": lambda s, p: F.try_element_at(s, F.lit(p[0] + 1 if p[0] >= 0 else p[0])),
    "list.sum": lambda s, p: _list_sum(s),
    "list.min": lambda s, p: F.when(~_has_null(s), F.array_min(s)),
    "list.max": lambda s, p: F.when(~_has_null(s), F.array_max(s)),
    "list.mean": lambda s, p: F.when(F.size(s) > 0, _list_sum(s) / F.size(s)),
    "list.hasnull": lambda s, p: _has_null(s),
    "list.all": lambda s, p: F.forall(s, lambda x: x),
    "list.any": lambda s, p: F.exists(s, lambda x: x),
    "struct.get": lambda s, p: s.getField(p[0]),
}

_BINARY: dict[str, Callable[[Column, Column], Column]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "truediv": lambda a, b: F.try_divide(a, b),
    "floordiv": _floordiv,
    "mod": _python_mod,
    "pow": _pow,
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "and": lambda a, b: a & b,
    "or": lambda a, b: a | b,
    "str.concat": lambda a, b: F.concat(a.cast("string"), b.cast("string")),
    "fillnull": lambda a, b: F.coalesce(a, b),
}

REFUSED = {"str.json_extract": "pandas returns typed JSON values, Spark's get_json_object text"}


def to_column(node: spec.Expr, env: Mapping[str, Column] | None = None) -> Column:
    """The Spark Column computing ``node`` over a DataFrame of the expression's inputs
    (``env``: the lambda variables in scope, inside ``list.map``/``list.filter``)."""
    env = env or {}
    match node:
        case spec.Col(name=name):
            return F.col(name)
        case spec.Var(name=name):
            if name not in env:
                raise SparkUnsupported(f"var({name!r}) is used outside list.map/list.filter")
            return env[name]
        case spec.Lit():
            return _lit(node)
        case spec.When(cases=cases, otherwise=otherwise):
            out: Any = F
            for cond, value in cases:
                out = out.when(
                    F.coalesce(to_column(cond, env), F.lit(False)), to_column(value, env)
                )
            return out.otherwise(to_column(otherwise, env))  # type: ignore[no-any-return]
        case spec.Call(fn=fn, args=args, dtype=dtype):
            return _call(fn, args, dtype, env)
    raise SparkUnsupported(f"not an expression: {node!r}")


_COLUMN_PARAM: dict[str, Callable[[Column, Column], Column]] = {
    "str.contains": lambda s, o: s.contains(o),
    "str.startswith": lambda s, o: s.startswith(o),
    "str.endswith": lambda s, o: s.endswith(o),
    "list.contains": _contains,
    "list.at": lambda s, o: F.when(  # Spark's index is a 1-based int
        o.between(-(2**31), 2**31 - 2),
        F.try_element_at(s, F.when(o >= 0, o + 1).otherwise(o).cast("int")),
    ),
}


def _call(
    fn: str, args: tuple[spec.Expr, ...], dtype: spec.DType | None, env: Mapping[str, Column]
) -> Column:
    if fn in REFUSED:
        raise SparkUnsupported(f"{fn} is not available on Spark: {REFUSED[fn]}")
    if fn not in FUNCTIONS:
        raise SparkUnsupported(f"unknown expression function {fn!r}")
    if fn == "now":
        return F.current_timestamp()
    if fn == "make_struct":
        if not isinstance(dtype, spec.StructType):
            raise SparkUnsupported("make_struct needs a struct type")
        given = dict(zip((str(_param(a)) for a in args[::2]),
                         (to_column(a, env) for a in args[1::2]), strict=True))  # fmt: skip
        return _struct(given, dtype)
    if fn == "zip":
        if not isinstance(dtype, spec.StructType):
            raise SparkUnsupported("zip needs a struct type")
        return _zip([str(_param(a)) for a in args[::2]], [to_column(a, env) for a in args[1::2]], dtype)  # fmt: skip
    first = to_column(args[0], env)
    if fn == "repeat":
        return F.array_repeat(first, to_column(args[1], env).cast("int"))
    if fn in ("list.map", "list.filter"):
        name, body = str(_param(args[1])), args[2]
        if fn == "list.map":
            return F.transform(first, lambda x: to_column(body, {**env, name: x}))
        return F.filter(
            first, lambda x: F.coalesce(to_column(body, {**env, name: x}), F.lit(False))
        )
    if fn == "str.parse":
        if dtype is None:
            raise SparkUnsupported("str.parse needs a target type")
        return _parse(first, dtype)
    if fn in _BINARY:
        return _BINARY[fn](first, to_column(args[1], env))
    if fn in _COLUMN_PARAM and len(args) > 1 and not isinstance(args[1], spec.Lit):
        return _COLUMN_PARAM[fn](first, to_column(args[1], env))  # a column-valued parameter
    if fn in _UNARY:
        return _UNARY[fn](first, [_param(a) for a in args[1:]])
    if fn == "neg":
        return -first
    if fn == "not":
        return ~first
    if fn == "isnull":
        return first.isNull()
    if fn == "dt.since":
        unit = _param(args[2]) if len(args) > 2 else "second"
        return _since(first, to_column(args[1], env), unit)
    if fn == "astype":
        if dtype is None:
            raise SparkUnsupported("astype needs a target type")
        return first.cast(spark_type(dtype))
    raise SparkUnsupported(f"unhandled expression function {fn!r}")  # pragma: no cover
