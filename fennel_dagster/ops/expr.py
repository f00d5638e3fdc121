"""IR expressions compiled to vectorised pandas: the reference registry of ``Call.fn``.

Nulls propagate as in SQL: any null operand gives null (``isnull``/``fillnull`` excepted),
and a null condition in ``when`` falls through to the next case.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeAlias

import numpy as np
import pandas as pd

from fennel_dagster.errors import ExecutionError
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


def _since(args: list[Series], params: list[Any]) -> Series:
    a, b = args
    unit = params[0] if params else "second"
    secs = (a - b).dt.total_seconds() / _UNIT[unit]
    return secs.floordiv(1).astype("Int64")


def _wall(s: Series, p: list[Any], at: int) -> Series:
    """Timestamps on the wall clock of the zone in parameter ``at`` (``dt.with_tz``), if any."""
    if len(p) <= at or not hasattr(s.dt, "tz") or s.dt.tz is None:
        return s
    return s.dt.tz_convert(p[at])


_PARAM_FNS: dict[str, Callable[[Series, list[Any]], Series]] = {
    "str.len": lambda s, p: s.str.len().astype("Int64"),
    "str.lower": lambda s, p: s.str.lower(),
    "str.upper": lambda s, p: s.str.upper(),
    "str.strip": lambda s, p: s.str.strip(),
    "str.contains": lambda s, p: _nullable_bool(s.str.contains(p[0], regex=False)),
    "str.startswith": lambda s, p: _nullable_bool(s.str.startswith(p[0])),
    "str.endswith": lambda s, p: _nullable_bool(s.str.endswith(p[0])),
    "str.split": lambda s, p: s.str.split(p[0], regex=False),
    "str.strptime": lambda s, p: pd.to_datetime(s, format=p[0]).dt.tz_localize(p[1] if len(p) > 1 else "UTC").dt.tz_convert("UTC"),
    "str.json_extract": _elementwise(lambda v, path: _json_path(v, path)),
    "dt.year": lambda s, p: _wall(s, p, 0).dt.year.astype("Int64"),
    "dt.month": lambda s, p: _wall(s, p, 0).dt.month.astype("Int64"),
    "dt.day": lambda s, p: _wall(s, p, 0).dt.day.astype("Int64"),
    "dt.hour": lambda s, p: _wall(s, p, 0).dt.hour.astype("Int64"),
    "dt.minute": lambda s, p: _wall(s, p, 0).dt.minute.astype("Int64"),
    "dt.second": lambda s, p: _wall(s, p, 0).dt.second.astype("Int64"),
    "dt.day_of_week": lambda s, p: _wall(s, p, 0).dt.dayofweek.astype("Int64"),
    "dt.since_epoch": lambda s, p: ((s - pd.Timestamp(0, tz="UTC")).dt.total_seconds() / _UNIT[p[0] if p else "second"]).floordiv(1).astype("Int64"),
    "dt.strftime": lambda s, p: _wall(s, p, 1).dt.strftime(p[0]),
    "num.abs": lambda s, p: s.abs(),
    "num.from_epoch": lambda s, p: pd.to_datetime(s.astype("Int64") * round(_UNIT[p[0]] * 1_000_000), unit="us", utc=True),
    "num.ceil": lambda s, p: np.ceil(s).astype("Int64"),
    "num.floor": lambda s, p: np.floor(s).astype("Int64"),
    "num.round": lambda s, p: s.round(int(p[0]) if p else 0),
    "num.sqrt": lambda s, p: np.sqrt(s.astype(float)),
    "num.log": lambda s, p: np.log(s.astype(float)),
    "num.to_string": _elementwise(lambda v: str(v)),
    "list.len": _elementwise(lambda v: len(v)),
    "list.contains": _elementwise(lambda v, x: x in list(v)),
    "list.at": _elementwise(lambda v, i: list(v)[i] if -len(v) <= i < len(v) else None),
    "list.sum": _elementwise(lambda v: sum(v)),
    "list.min": _elementwise(lambda v: min(v) if len(v) else None),
    "list.max": _elementwise(lambda v: max(v) if len(v) else None),
    "list.mean": _elementwise(lambda v: sum(v) / len(v) if len(v) else None),
    "list.hasnull": _elementwise(lambda v: any(_isnull(x) for x in v)),
    "struct.get": _elementwise(lambda v, f: v.get(f) if isinstance(v, dict) else getattr(v, f, None)),
}  # fmt: skip


def _pairwise(fn: Callable[[Any, Any], Any], boolean: bool) -> Callable[[Series, Series], Series]:
    """A function of a column and a column-valued parameter, row by row; null in, null out."""

    def run(s: Series, other: Series) -> Series:
        out = pd.Series(
            [None if _isnull(a) or _isnull(b) else fn(a, b)
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
    "list.contains": _pairwise(lambda a, b: b in list(a), True),
    "list.at": _pairwise(_at, False),
}

_SERIES_FNS: dict[str, Callable[[list[Series]], Series]] = {
    "add": _binary(lambda a, b: a + b),
    "sub": _binary(lambda a, b: a - b),
    "mul": _binary(lambda a, b: a * b),
    "truediv": _binary(lambda a, b: a / b.where(b != 0)),
    "floordiv": _binary(lambda a, b: a // b.where(b != 0)),
    "mod": _binary(lambda a, b: a % b.where(b != 0)),
    "pow": _binary(lambda a, b: a**b),
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
    "neg", "not", "isnull", "fillnull", "astype", "dt.since",
}  # fmt: skip


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
    """Cast to the pandas representation the platform uses for ``dtype``."""
    match dtype:
        case (
            spec.IntType() | spec.BetweenType(of=spec.IntType()) | spec.OneOfType(of=spec.IntType())
        ):
            return s.astype("Int64")
        case spec.FloatType() | spec.BetweenType():
            return s.astype("Float64").astype(float) if not s.isna().any() else s.astype("Float64")
        case spec.BoolType():
            return s.astype("boolean")
        case spec.StringType() | spec.RegexType() | spec.OneOfType():
            return s.map(lambda v: None if _isnull(v) else str(v)).astype(object)
        case spec.TimestampType():
            return pd.to_datetime(s, utc=True)
        case spec.OptionalType(of=inner):
            return astype(s, inner)
    return s


def compile_expr(node: spec.Expr) -> Callable[[pd.DataFrame], Series]:
    """A function from a batch to the expression's column (index aligned with the batch)."""
    match node:
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
    first = compile_expr(args[0])
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
