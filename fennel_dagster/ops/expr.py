"""IR expressions compiled to vectorised pandas: the reference registry of ``Call.fn``.

Nulls propagate as in SQL: any null operand gives null (``isnull``/``fillnull`` excepted),
and a null condition in ``when`` falls through to the next case.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, TypeAlias

import numpy as np
import pandas as pd

from fennel_dagster.errors import ExecutionError
from fennel_dagster.ops.columns import UTC_NS
from fennel_dagster.wire import spec

Series: TypeAlias = pd.Series


class ExprError(ExecutionError, ValueError):
    """An expression that cannot be evaluated (unknown function, missing column)."""


def _lit_value(node: spec.Lit) -> Any:
    if isinstance(node.dtype, spec.TimestampType) and isinstance(node.value, str):
        return pd.Timestamp(node.value).tz_convert("UTC")
    if isinstance(node.dtype, spec.DateType) and isinstance(node.value, str):
        return pd.Timestamp(node.value).date()
    return node.value


def _arg_value(node: spec.Expr) -> Any:
    if not isinstance(node, spec.Lit):
        raise ExprError(f"expected a literal parameter, got {node!r}")
    return _lit_value(node)


def _nullable_bool(s: Series) -> Series:
    return s.astype("boolean")


def _binary(op: Callable[[Any, Any], Any]) -> Callable[[list[Series]], Series]:
    def run(args: list[Series]) -> Series:
        a, b = args[0].infer_objects(), args[1].infer_objects()
        mask = a.isna() | b.isna()
        return pd.Series(op(a, b), index=a.index).mask(mask)

    return run


def _compare(op: Callable[[Any, Any], Any]) -> Callable[[list[Series]], Series]:
    def run(args: list[Series]) -> Series:
        a, b = args
        mask = a.isna() | b.isna()
        return _nullable_bool(pd.Series(op(a, b), index=a.index).mask(mask))

    return run


def _and(args: list[Series]) -> Series:
    return _nullable_bool(args[0]) & _nullable_bool(args[1])


def _or(args: list[Series]) -> Series:
    return _nullable_bool(args[0]) | _nullable_bool(args[1])


def _elementwise(fn: Callable[..., Any]) -> Callable[[Series, list[Any]], Series]:
    def run(s: Series, params: list[Any]) -> Series:
        # as objects: a nullable Int64 column would otherwise hand floats to ``fn``
        return s.astype(object).map(lambda v: None if _isnull(v) else fn(v, *params))

    return run


def _isnull(v: Any) -> bool:
    if isinstance(v, list | dict | np.ndarray):
        return False
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


_UNIT = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 7 * 86400,
         "millisecond": 1e-3, "microsecond": 1e-6}  # fmt: skip


def _strptime(s: Series, p: list[Any]) -> Series:
    """Parsed in the zone named (default UTC), unless the text has its own offset (``%z``)."""
    parsed = pd.to_datetime(s, format=p[0])
    if parsed.dt.tz is None:
        parsed = parsed.dt.tz_localize(p[1] if len(p) > 1 else "UTC")
    return parsed.dt.tz_convert("UTC")


def _since(args: list[Series], params: list[Any]) -> Series:
    a, b = args
    unit = params[0] if params else "second"
    if unit in CALENDAR_UNITS:
        return _calendar_since(a, b, CALENDAR_UNITS[unit])
    secs = (a - b).dt.total_seconds() / _UNIT[unit]
    return secs.floordiv(1).astype("Int64")


CALENDAR_UNITS = {"month": 1, "year": 12}  # months each: they have no fixed length
_DAY_US = 86_400_000_000


def _calendar_since(a: Series, b: Series, months_each: int) -> Series:
    """Whole calendar months (or years) from ``b`` to ``a``, floored as the other units are:
    an age in years is the birthdays passed (Jan 31 to Feb 28 is no month). In UTC."""
    a, b = _utc(a), _utc(b)
    months = (a.dt.year - b.dt.year).astype("Int64") * 12 + (a.dt.month - b.dt.month)
    months = months - (_rest_of_month(a) < _rest_of_month(b)).astype("Int64")
    return months.floordiv(months_each).astype("Int64")


def _utc(s: Series) -> Series:
    return s.dt.tz_convert("UTC") if s.dt.tz is not None else s


def _rest_of_month(s: Series) -> Series:
    """How far into its month each time is (its day, then its time of day), in µs."""
    seconds = (s.dt.hour.astype("Int64") * 60 + s.dt.minute) * 60 + s.dt.second
    return s.dt.day.astype("Int64") * _DAY_US + seconds * 1_000_000 + s.dt.microsecond


def _since_epoch(s: Series, params: list[Any]) -> Series:
    epoch = pd.Series(pd.Timestamp(0, tz="UTC"), index=s.index)
    return _since([s, epoch], params or ["second"])


def _wall(s: Series, p: list[Any], at: int) -> Series:
    """Timestamps on the wall clock of the zone in parameter ``at`` (``dt.with_tz``), if any."""
    if len(p) <= at or not hasattr(s.dt, "tz") or s.dt.tz is None:
        return s
    return s.dt.tz_convert(p[at])


def _float_fn(fn: Callable[[Any], Any], s: Series) -> Series:
    with np.errstate(invalid="ignore", divide="ignore"):
        return pd.Series(fn(s.astype(float)), index=s.index)


def _round(s: Series, p: list[Any]) -> Series:
    """``round()`` gives an int, ``round(n)`` a float with ``n`` decimals (half to even)."""
    decimals = int(p[0]) if p else 0
    if decimals == 0:
        return s.astype(float).round(0).astype("Int64")
    return s.astype(float).round(decimals)


def _has_null(v: Any) -> bool:
    return any(_isnull(x) for x in v)


def _all(v: Any) -> bool | None:
    """Three-valued: False if an item is False, else null if an item is null, else True."""
    if any(not _isnull(x) and not x for x in v):
        return False
    return None if _has_null(v) else True


def _any(v: Any) -> bool | None:
    """Three-valued: True if an item is True, else null if an item is null, else False."""
    if any(not _isnull(x) and bool(x) for x in v):
        return True
    return None if _has_null(v) else False


def _contains(v: Any, x: Any) -> bool | None:
    """As SQL's ``array_contains``: found is True, else null if the item or a list element
    is null (an empty list contains nothing, not even null), else False."""
    items = list(v)
    if not items:
        return False
    if _isnull(x):
        return None
    if any(not _isnull(y) and y == x for y in items):
        return True
    return None if _has_null(items) else False


_PARAM_FNS: dict[str, Callable[[Series, list[Any]], Series]] = {
    "str.len": lambda s, p: s.str.len().astype("Int64"),
    "str.lower": lambda s, p: s.str.lower(),
    "str.upper": lambda s, p: s.str.upper(),
    "str.strip": lambda s, p: s.str.strip(),
    "str.contains": lambda s, p: _nullable_bool(s.str.contains(p[0], regex=False)),
    "str.startswith": lambda s, p: _nullable_bool(s.str.startswith(p[0])),
    "str.endswith": lambda s, p: _nullable_bool(s.str.endswith(p[0])),
    "str.split": lambda s, p: s.str.split(p[0], regex=False),
    "str.strptime": lambda s, p: _strptime(s, p),
    "str.json_extract": _elementwise(lambda v, path: _json_path(v, path)),
    "dt.year": lambda s, p: _wall(s, p, 0).dt.year.astype("Int64"),
    "dt.month": lambda s, p: _wall(s, p, 0).dt.month.astype("Int64"),
    "dt.day": lambda s, p: _wall(s, p, 0).dt.day.astype("Int64"),
    "dt.hour": lambda s, p: _wall(s, p, 0).dt.hour.astype("Int64"),
    "dt.minute": lambda s, p: _wall(s, p, 0).dt.minute.astype("Int64"),
    "dt.second": lambda s, p: _wall(s, p, 0).dt.second.astype("Int64"),
    "dt.day_of_week": lambda s, p: _wall(s, p, 0).dt.dayofweek.astype("Int64"),
    "dt.since_epoch": _since_epoch,
    "dt.strftime": lambda s, p: _wall(s, p, 1).dt.strftime(p[0]),
    "num.abs": lambda s, p: s.abs(),
    "num.from_epoch": lambda s, p: pd.to_datetime(s.astype("Int64") * round(_UNIT[p[0]] * 1_000_000), unit="us", utc=True),
    "num.ceil": lambda s, p: np.ceil(s).astype("Int64"),
    "num.floor": lambda s, p: np.floor(s).astype("Int64"),
    "num.round": _round,
    "num.sqrt": lambda s, p: _float_fn(np.sqrt, s),
    "num.log": lambda s, p: _float_fn(np.log, s) / (math.log(p[0]) if p else 1.0),
    "num.sin": lambda s, p: _float_fn(np.sin, s),
    "num.cos": lambda s, p: _float_fn(np.cos, s),
    "num.tan": lambda s, p: _float_fn(np.tan, s),
    "num.arcsin": lambda s, p: _float_fn(np.arcsin, s),  # NaN (null) outside [-1, 1]
    "num.arccos": lambda s, p: _float_fn(np.arccos, s),
    "num.arctan": lambda s, p: _float_fn(np.arctan, s),
    "num.to_string": _elementwise(lambda v: str(v)),
    "list.len": _elementwise(lambda v: len(v)),
    "list.contains": lambda s, p: _pairwise(_contains, True, True)(s, pd.Series([p[0]] * len(s), index=s.index, dtype=object)),
    "list.at": _elementwise(lambda v, i: list(v)[i] if -len(v) <= i < len(v) else None),
    "list.sum": _elementwise(lambda v: None if _has_null(v) else sum(v)),
    "list.min": _elementwise(lambda v: None if _has_null(v) or not len(v) else min(v)),
    "list.max": _elementwise(lambda v: None if _has_null(v) or not len(v) else max(v)),
    "list.mean": _elementwise(lambda v: None if _has_null(v) or not len(v) else sum(v) / len(v)),
    "list.hasnull": _elementwise(lambda v: _has_null(v)),
    "list.all": _elementwise(lambda v: _all(v)),
    "list.any": _elementwise(lambda v: _any(v)),
    "struct.get": _elementwise(lambda v, f: v.get(f) if isinstance(v, dict) else getattr(v, f, None)),
}  # fmt: skip


def _pairwise(
    fn: Callable[[Any, Any], Any], boolean: bool, null_param: bool = False
) -> Callable[[Series, Series], Series]:
    """A function of a column and a column-valued parameter, row by row; null in, null out
    (``null_param``: a null parameter is passed to ``fn``, which decides)."""

    def run(s: Series, other: Series) -> Series:
        out = pd.Series(
            [None if _isnull(a) or (_isnull(b) and not null_param) else fn(a, b)
             for a, b in zip(s.astype(object), other.astype(object), strict=True)],
            index=s.index, dtype=object,
        )  # fmt: skip
        return out.astype("boolean") if boolean else out.infer_objects()

    return run


def _at(v: Any, i: Any) -> Any:
    items = list(v)
    return items[int(i)] if -len(items) <= int(i) < len(items) else None


# ``col("x").str.contains(col("y"))``: the parameter is another column (Fennel allows it)
_COLUMN_PARAM: dict[str, Callable[[Series, Series], Series]] = {
    "str.contains": _pairwise(lambda a, b: b in a, True),
    "str.startswith": _pairwise(lambda a, b: a.startswith(b), True),
    "str.endswith": _pairwise(lambda a, b: a.endswith(b), True),
    "list.contains": _pairwise(_contains, True, True),
    "list.at": _pairwise(_at, False),
}

_SERIES_FNS: dict[str, Callable[[list[Series]], Series]] = {
    "add": _binary(lambda a, b: a + b),
    "sub": _binary(lambda a, b: a - b),
    "mul": _binary(lambda a, b: a * b),
    "truediv": _binary(lambda a, b: a / b.where(b != 0)),
    "floordiv": _binary(lambda a, b: a // b.where(b != 0)),
    "mod": _binary(lambda a, b: a % b.where(b != 0)),
    "pow": _binary(lambda a, b: _pow(a, b)),
    "eq": _compare(lambda a, b: a == b),
    "ne": _compare(lambda a, b: a != b),
    "lt": _compare(lambda a, b: a < b),
    "le": _compare(lambda a, b: a <= b),
    "gt": _compare(lambda a, b: a > b),
    "ge": _compare(lambda a, b: a >= b),
    "and": _and,
    "or": _or,
    "str.concat": lambda args: args[0].astype("string") + args[1].astype("string"),
}

FUNCTIONS = frozenset(_PARAM_FNS) | frozenset(_SERIES_FNS) | {
    "neg", "not", "isnull", "fillnull", "astype", "dt.since", "str.parse", "now", "repeat",
    "list.map", "list.filter", "zip", "make_struct",
}  # fmt: skip


def _pow(a: Series, b: Series) -> Series:
    ints = pd.api.types.is_integer_dtype(a.dtype) and pd.api.types.is_integer_dtype(b.dtype)
    if ints and bool((b < 0).fillna(False).any()):
        raise ExprError(
            "pow: an int raised to a negative int power has no int value; make the base or "
            "the exponent a float, e.g. lit(2).num.pow(lit(-2.0))"
        )
    return a**b


def _repeat(value: Series, by: Series) -> Series:
    return pd.Series(
        [None if _isnull(n) else [None if _isnull(v) else v] * max(int(n), 0)
         for v, n in zip(value.astype(object), by.astype(object), strict=True)],
        index=value.index, dtype=object,
    )  # fmt: skip


def _zip(names: list[str], lists: list[Series], dtype: spec.StructType, index: pd.Index) -> Series:
    """Lists zipped into structs (dicts) up to the shortest; null if any list is null."""
    rows = zip(*(s.astype(object) for s in lists), strict=True)
    out = [
        None if any(_isnull(v) for v in row)
        else [{f.name: _plain(dict(zip(names, items, strict=True)).get(f.name)) for f in dtype.fields}
              for items in zip(*row, strict=False)]
        for row in rows
    ]  # fmt: skip
    return pd.Series(out, index=index, dtype=object)


def _make_struct(
    names: list[str], values: list[Series], dtype: spec.StructType, index: pd.Index
) -> Series:
    """A struct (a dict of every field, null where not given or null) per row."""
    given = dict(zip(names, (v.astype(object).tolist() for v in values), strict=True))
    out = [
        {f.name: _plain(given[f.name][i]) if f.name in given else None for f in dtype.fields}
        for i in range(len(index))
    ]
    return pd.Series(out, index=index, dtype=object)


def _items(values: list[Any]) -> Series:
    """A lambda's items as a typed column (ints stay ints next to nulls)."""
    s = pd.Series(values, dtype=object)
    kinds = {type(v) for v in values if not _isnull(v)}
    if kinds and all(issubclass(k, bool | np.bool_) for k in kinds):
        return s.astype("boolean")
    if kinds and all(issubclass(k, int | np.integer) and not issubclass(k, bool | np.bool_) for k in kinds):  # fmt: skip
        return s.astype("Int64")
    if kinds and all(issubclass(k, int | float | np.integer | np.floating) for k in kinds):
        return s.astype(float)
    return s


def _plain(v: Any) -> Any:
    if _isnull(v):
        return None
    return v.item() if isinstance(v, np.generic) else v


def _lambda(
    fn: str,
    lists: Callable[[pd.DataFrame], Series],
    name: str,
    body: Callable[[pd.DataFrame], Series],
) -> Callable[[pd.DataFrame], Series]:
    """``list.map``/``list.filter``: the body evaluated once over every item of every list,
    each item beside its row's columns (so the body may read them), then regrouped."""

    def run(df: pd.DataFrame) -> Series:
        values = list(lists(df).astype(object))
        null = [_isnull(v) for v in values]
        lengths = np.array(
            [0 if n else len(v) for v, n in zip(values, null, strict=True)], dtype=int
        )
        items = [x for v, n in zip(values, null, strict=True) if not n for x in v]
        frame = df.iloc[np.repeat(np.arange(len(df)), lengths)].reset_index(drop=True)
        frame[spec.var_key(name)] = _items(items)
        got = list(body(frame).astype(object)) if items else []
        out: list[Any] = []
        start = 0
        for n, size in zip(null, lengths, strict=True):
            part = range(start, start + int(size))
            start += int(size)
            if n:
                out.append(None)
            elif fn == "list.map":
                out.append([_plain(got[k]) for k in part])
            else:
                out.append([items[k] for k in part if not _isnull(got[k]) and bool(got[k])])
        return pd.Series(out, index=df.index, dtype=object)

    return run


_TEXT_HINT = 'strings are quoted ("hi"), booleans are true/false, lists [1, 2]'


def parse_json(text: str, dtype: spec.DType) -> Any:
    """``str.parse``: the JSON ``text`` as a value of ``dtype`` (structs as dicts, nulls as
    None); text that is not JSON, or JSON of another type, is an ``ExprError``."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ExprError(f"str.parse: {text!r} is not valid JSON ({e.msg}); {_TEXT_HINT}") from e
    return _conform(value, dtype, text)


def _conform(v: Any, dtype: spec.DType, text: str) -> Any:
    def bad() -> ExprError:
        return ExprError(f"str.parse: {text!r} holds {json.dumps(v)}, which is not a {type(dtype).__name__.removesuffix('Type').lower()}; {_TEXT_HINT}")  # fmt: skip

    if v is None:
        return None
    match dtype:
        case spec.OptionalType(of=inner):
            return _conform(v, inner, text)
        case spec.IntType():
            if isinstance(v, bool) or not isinstance(v, int):
                raise bad()
            return v
        case spec.FloatType():
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise bad()
            return float(v)
        case spec.BoolType():
            if not isinstance(v, bool):
                raise bad()
            return v
        case spec.StringType():
            if not isinstance(v, str):
                raise bad()
            return v
        case spec.ListType(of=inner):
            if not isinstance(v, list):
                raise bad()
            return [_conform(x, inner, text) for x in v]
        case spec.MapType(of=inner):
            if not isinstance(v, dict):
                raise bad()
            return {k: _conform(x, inner, text) for k, x in v.items()}
        case spec.StructType(fields=fields):
            if not isinstance(v, dict):
                raise bad()
            return {f.name: _conform(v.get(f.name), f.dtype, text) for f in fields}
    raise ExprError(f"str.parse cannot parse into {dtype!r}")


def _json_path(text: str, path: str) -> Any:
    value: Any = json.loads(text)
    for part in path.lstrip("$.").split("."):
        if not part:
            continue
        value = value.get(part) if isinstance(value, dict) else None
        if value is None:
            return None
    return value


def astype(s: Series, dtype: spec.DType) -> Series:
    """Cast to the pandas representation the platform uses for ``dtype`` (a copy)."""
    match dtype:
        case (
            spec.IntType() | spec.BetweenType(of=spec.IntType()) | spec.OneOfType(of=spec.IntType())
        ):
            return s.copy() if s.dtype == "Int64" else s.astype("Int64")
        case spec.FloatType() | spec.BetweenType():
            if s.dtype == np.float64 and not np.isnan(s.to_numpy()).any():
                return s.copy()  # already what the cast below makes (no NaN to turn into NA)
            return s.astype("Float64").astype(float) if not s.isna().any() else s.astype("Float64")
        case spec.BoolType():  # as floats: numpy's bool unless a null needs pandas' boolean
            if s.dtype == np.bool_:
                return s.copy()
            b = s.astype("boolean")
            return b.astype(bool) if not b.isna().any() else b
        case spec.StringType() | spec.RegexType() | spec.OneOfType():
            if s.dtype == object and all(v is None or type(v) is str for v in s.tolist()):
                return s.copy()
            return s.map(lambda v: None if _isnull(v) else str(v)).astype(object)
        case spec.TimestampType():
            if s.dtype == UTC_NS:
                return s.copy()
            return pd.to_datetime(s, utc=True)
        case spec.OptionalType(of=inner):
            return astype(s, inner)
    return s


def compile_expr(node: spec.Expr) -> Callable[[pd.DataFrame], Series]:
    """A function from a batch to the expression's column (index aligned with the batch)."""
    match node:
        case spec.Var(name=name):
            key = spec.var_key(name)

            def item(df: pd.DataFrame) -> Series:
                if key not in df.columns:
                    raise ExprError(f"var({name!r}) is used outside list.map/list.filter")
                return df[key]

            return item
        case spec.Col(name=name):

            def column(df: pd.DataFrame) -> Series:
                if name not in df.columns:
                    raise ExprError(
                        f"column {name!r} is not in the input (columns: {', '.join(map(str, df.columns))})"
                    )
                return df[name]

            return column
        case spec.Lit():
            value = _lit_value(node)
            return lambda df: pd.Series(
                [value] * len(df), index=df.index, dtype=object if value is None else None
            )
        case spec.When(cases=cases, otherwise=otherwise):
            conds = [(compile_expr(c), compile_expr(v)) for c, v in cases]
            other = compile_expr(otherwise)

            def when(df: pd.DataFrame) -> Series:
                out = other(df).astype(object).copy()
                decided = pd.Series(False, index=df.index)
                for cond, value in conds:
                    hit = _nullable_bool(cond(df)).fillna(False).astype(bool) & ~decided
                    out[hit] = value(df)[hit]
                    decided |= hit
                return out.infer_objects()

            return when
        case spec.Call(fn=fn, args=args, dtype=dtype):
            return _compile_call(fn, args, dtype)
    raise ExprError(f"not an expression: {node!r}")


def _compile_call(
    fn: str, args: tuple[spec.Expr, ...], dtype: spec.DType | None
) -> Callable[[pd.DataFrame], Series]:
    if fn not in FUNCTIONS:
        raise ExprError(
            f"unknown expression function {fn!r}; known: {', '.join(sorted(FUNCTIONS))}"
        )
    if fn == "now":
        return lambda df: pd.Series(pd.Timestamp.now(tz="UTC"), index=df.index)
    if fn == "make_struct":
        if not isinstance(dtype, spec.StructType):
            raise ExprError("make_struct needs a struct type")
        st, names = dtype, [str(_arg_value(a)) for a in args[::2]]
        parts = [compile_expr(a) for a in args[1::2]]
        return lambda df: _make_struct(names, [p(df) for p in parts], st, df.index)
    if fn == "zip":
        if not isinstance(dtype, spec.StructType):
            raise ExprError("zip needs a struct type")
        st, names = dtype, [str(_arg_value(a)) for a in args[::2]]
        parts = [compile_expr(a) for a in args[1::2]]
        return lambda df: _zip(names, [p(df) for p in parts], st, df.index)
    first = compile_expr(args[0])
    if fn == "repeat":
        by = compile_expr(args[1])
        return lambda df: _repeat(first(df), by(df))
    if fn in ("list.map", "list.filter"):
        name = _arg_value(args[1])
        return _lambda(fn, first, str(name), compile_expr(args[2]))
    if fn == "str.parse":
        if dtype is None:
            raise ExprError("str.parse needs a target type")
        target = dtype
        return lambda df: (
            first(df).astype(object).map(lambda v: None if _isnull(v) else parse_json(v, target))
        )
    if fn in _SERIES_FNS:
        rest = [compile_expr(a) for a in args[1:]]
        impl = _SERIES_FNS[fn]
        return lambda df: impl([first(df), *(r(df) for r in rest)])
    if fn in _COLUMN_PARAM and len(args) > 1 and not isinstance(args[1], spec.Lit):
        other, rowwise = compile_expr(args[1]), _COLUMN_PARAM[fn]
        return lambda df: rowwise(first(df), other(df))
    if fn in _PARAM_FNS:
        params = [_arg_value(a) for a in args[1:]]
        pimpl = _PARAM_FNS[fn]
        return lambda df: pimpl(first(df), params)
    if fn == "neg":
        return lambda df: -first(df)
    if fn == "not":
        return lambda df: ~_nullable_bool(first(df))
    if fn == "isnull":
        return lambda df: first(df).map(_isnull).astype(bool)
    if fn == "fillnull":
        fill = compile_expr(args[1])

        def fillnull(df: pd.DataFrame) -> Series:
            s = first(df)
            mask = s.map(_isnull).astype(bool)
            return s.astype(object).where(~mask, fill(df)).infer_objects()

        return fillnull
    if fn == "dt.since":
        other = compile_expr(args[1])
        params = [_arg_value(a) for a in args[2:]]
        return lambda df: _since([first(df), other(df)], params)
    if fn == "astype":
        if dtype is None:
            raise ExprError("astype needs a target type")
        return lambda df: astype(first(df), dtype)
    raise ExprError(f"unhandled expression function {fn!r}")  # pragma: no cover


def evaluate(node: spec.Expr, df: pd.DataFrame) -> Series:
    return compile_expr(node)(df)
