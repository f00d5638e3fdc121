"""Expressions: ``col("amount") * 2 > lit(10)``, ``when(...).then(...).otherwise(...)``.

Every builder method returns a new ``Expr`` wrapping an IR node (``wire.spec.Col/Lit/Call/
When``), so expressions serialise, hash and compile to pandas or Spark without Python code.
"""

from __future__ import annotations

import builtins
import datetime as dt
import math
import zoneinfo
from collections.abc import Mapping
from typing import Any

import pandas as pd

from fennel_dagster.declare import semantics
from fennel_dagster.declare.dtypes import to_dtype
from fennel_dagster.declare.errors import DeclarationError
from fennel_dagster.wire import spec


def _ir(value: Any) -> spec.Expr:
    if isinstance(value, Expr):
        return value.node
    return lit(value).node


class InvalidExprException(DeclarationError, ValueError):
    """An expression that is not complete (Fennel's name): ``when(...)`` without ``then``."""


class Expr:
    __slots__ = ("node",)

    def typeof(self, schema: Mapping[str, Any] | None = None) -> Any:
        """The expression's type given the input columns' types (Fennel's), e.g.
        ``(col("x") + col("y")).typeof(schema={"x": int, "y": float}) == float``; a
        ``ValueError`` names what does not type-check."""
        return semantics.installed().typeof(self, schema or {})

    def matches_type(self, dtype: Any, schema: Mapping[str, Any] | None = None) -> bool:
        return bool(self.typeof(schema) == dtype)

    def eval(self, input_df: pd.DataFrame, schema: Mapping[str, Any] | None = None) -> pd.Series:
        """The expression over ``input_df``'s rows, cast to its type, as pipelines compute it;
        ``schema`` gives the types of its columns (Fennel requires it too). The parameter names
        are Fennel's: ``expr.eval(input_df=df, schema={...})``."""
        if schema is None:
            raise DeclarationError(
                "Expr.eval(input_df, schema) needs the schema: the types of input_df's columns, "
                'e.g. expr.eval(df, schema={"amount": int})'
            )
        return semantics.installed().eval(self, input_df, schema)

    def __init__(self, node: spec.Expr) -> None:
        self.node = node

    def to_ir(self) -> spec.Expr:
        return self.node

    def _call(self, fn: str, *args: Any, dtype: spec.DType | None = None) -> Expr:
        return Expr(spec.Call(fn, (self.node, *(_ir(a) for a in args)), dtype))

    # arithmetic
    def __add__(self, o: Any) -> Expr:
        return self._call("add", o)

    def __radd__(self, o: Any) -> Expr:
        return Expr(spec.Call("add", (_ir(o), self.node)))

    def __sub__(self, o: Any) -> Expr:
        return self._call("sub", o)

    def __rsub__(self, o: Any) -> Expr:
        return Expr(spec.Call("sub", (_ir(o), self.node)))

    def __mul__(self, o: Any) -> Expr:
        return self._call("mul", o)

    def __rmul__(self, o: Any) -> Expr:
        return Expr(spec.Call("mul", (_ir(o), self.node)))

    def __truediv__(self, o: Any) -> Expr:
        return self._call("truediv", o)

    def __rtruediv__(self, o: Any) -> Expr:
        return Expr(spec.Call("truediv", (_ir(o), self.node)))

    def __floordiv__(self, o: Any) -> Expr:
        return self._call("floordiv", o)

    def __mod__(self, o: Any) -> Expr:
        return self._call("mod", o)

    def __pow__(self, o: Any) -> Expr:
        return self._call("pow", o)

    def __neg__(self) -> Expr:
        return self._call("neg")

    # comparison (``==`` builds an expression, as in polars / Fennel)
    def __eq__(self, o: Any) -> Expr:  # type: ignore[override]
        return self._call("eq", o)

    def __ne__(self, o: Any) -> Expr:  # type: ignore[override]
        return self._call("ne", o)

    def __lt__(self, o: Any) -> Expr:
        return self._call("lt", o)

    def __le__(self, o: Any) -> Expr:
        return self._call("le", o)

    def __gt__(self, o: Any) -> Expr:
        return self._call("gt", o)

    def __ge__(self, o: Any) -> Expr:
        return self._call("ge", o)

    # boolean
    def __and__(self, o: Any) -> Expr:
        return self._call("and", o)

    def __or__(self, o: Any) -> Expr:
        return self._call("or", o)

    def __invert__(self) -> Expr:
        return self._call("not")

    def __bool__(self) -> bool:
        raise DeclarationError(
            "an expression has no truth value: use & | ~ instead of and/or/not, "
            "and when(...).then(...) instead of if"
        )

    __hash__ = None  # type: ignore[assignment]

    # nulls and types
    def isnull(self) -> Expr:
        return self._call("isnull")

    def fillnull(self, value: Any) -> Expr:
        return self._call("fillnull", value)

    def astype(self, tp: Any) -> Expr:
        return self._call("astype", dtype=to_dtype(tp, "astype()"))

    @property
    def str(self) -> _StrNs:
        return _StrNs(self)

    @property
    def dt(self) -> _DtNs:
        return _DtNs(self)

    @property
    def num(self) -> _NumNs:
        return _NumNs(self)

    def abs(self) -> Expr:
        return self._call("num.abs")

    def round(self, precision: int = 0) -> Expr:
        return self._call("num.round", _precision(precision))

    def floor(self) -> Expr:
        return self._call("num.floor")

    def ceil(self) -> Expr:
        return self._call("num.ceil")

    @property
    def list(self) -> _ListNs:
        return _ListNs(self)

    @property
    def struct(self) -> _StructNs:
        return _StructNs(self)

    def __repr__(self) -> builtins.str:  # `str` here is the .str namespace above
        return f"Expr({self.node!r})"


def _precision(precision: Any) -> int:
    if isinstance(precision, bool) or not isinstance(precision, int) or precision < 0:
        raise InvalidExprException(
            f"round(precision={precision!r}): the number of decimals must be an int >= 0, "
            "e.g. round(2); round() (0 decimals) gives an int"
        )
    return precision


def _var_name(name: Any, where: str) -> builtins.str:
    if not isinstance(name, builtins.str) or not name.isidentifier():
        raise InvalidExprException(
            f'{where}: the variable must be a name such as "x", got {name!r} '
            '(write e.g. col("l").list.map("x", var("x") * 2))'
        )
    return name


def _expr_arg(value: Any, where: str) -> spec.Expr:
    if callable(value) and not isinstance(value, Expr):
        raise InvalidExprException(
            f'{where}: pass an expression such as var("x") > 0, not a Python function'
        )
    return _ir(value)


class _Ns:
    prefix = ""

    def __init__(self, e: Expr) -> None:
        self._e = e

    def _c(self, name: str, *args: Any, dtype: spec.DType | None = None) -> Expr:
        return self._e._call(f"{self.prefix}.{name}", *args, dtype=dtype)


class _StrNs(_Ns):
    prefix = "str"

    def len(self) -> Expr:
        return self._c("len")

    def lower(self) -> Expr:
        return self._c("lower")

    def upper(self) -> Expr:
        return self._c("upper")

    def strip(self) -> Expr:
        return self._c("strip")

    def contains(self, s: Any) -> Expr:
        return self._c("contains", s)

    def startswith(self, s: Any) -> Expr:
        return self._c("startswith", s)

    def endswith(self, s: Any) -> Expr:
        return self._c("endswith", s)

    def concat(self, s: Any) -> Expr:
        return self._c("concat", s)

    def split(self, sep: str) -> Expr:
        return self._c("split", sep)

    def strptime(self, fmt: str, timezone: str = "UTC") -> Expr:
        return self._c("strptime", fmt, timezone)

    def json_extract(self, path: str) -> Expr:
        return self._c("json_extract", path)

    def parse(self, dtype: Any) -> Expr:
        """The JSON text as a value of ``dtype`` (``int``, ``List[int]``, a struct, ...);
        text that is not JSON of that type is an error."""
        return self._c("parse", dtype=to_dtype(dtype, "str.parse()"))


class _DtNs(_Ns):
    """``col("t").dt.hour``; ``.dt.with_tz(timezone="US/Eastern").hour`` reads the parts on
    that zone's wall clock (the zone is a trailing parameter of each call)."""

    prefix = "dt"

    def __init__(self, e: Expr, tz: str | None = None) -> None:
        super().__init__(e)
        self._tz = tz

    def _zoned(self) -> tuple[str, ...]:
        return (self._tz,) if self._tz else ()

    def with_tz(self, timezone: str) -> _DtNs:
        try:
            zoneinfo.ZoneInfo(timezone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as e:
            raise DeclarationError(f"dt.with_tz: unknown time zone {timezone!r}") from e
        return _DtNs(self._e, timezone)

    def _part(self, name: str) -> Expr:
        return self._c(name, *self._zoned())

    @property
    def year(self) -> Expr:
        return self._part("year")

    @property
    def month(self) -> Expr:
        return self._part("month")

    @property
    def day(self) -> Expr:
        return self._part("day")

    @property
    def hour(self) -> Expr:
        return self._part("hour")

    @property
    def minute(self) -> Expr:
        return self._part("minute")

    @property
    def second(self) -> Expr:
        return self._part("second")

    @property
    def day_of_week(self) -> Expr:
        return self._part("day_of_week")

    def since(self, other: Any, unit: str = "second") -> Expr:
        return self._c("since", other, _time_unit(unit, "dt.since"))

    def since_epoch(self, unit: str = "second") -> Expr:
        return self._c("since_epoch", _time_unit(unit, "dt.since_epoch"))

    def strftime(self, fmt: str) -> Expr:
        return self._c("strftime", fmt, *self._zoned())


class _NumNs(_Ns):
    prefix = "num"

    def abs(self) -> Expr:
        return self._c("abs")

    def ceil(self) -> Expr:
        return self._c("ceil")

    def floor(self) -> Expr:
        return self._c("floor")

    def round(self, precision: int = 0) -> Expr:
        return self._c("round", _precision(precision))

    def sqrt(self) -> Expr:
        return self._c("sqrt")

    def pow(self, exponent: Any) -> Expr:
        return self._e._call("pow", exponent)

    def log(self, base: float = math.e) -> Expr:
        if isinstance(base, bool) or not isinstance(base, int | float) or not base > 0 or base == 1:
            raise InvalidExprException(
                f"num.log(base={base!r}): the base must be a positive number other than 1, "
                "e.g. log(base=10.0); log() is the natural logarithm"
            )
        return self._c("log") if base == math.e else self._c("log", float(base))

    def sin(self) -> Expr:
        return self._c("sin")

    def cos(self) -> Expr:
        return self._c("cos")

    def tan(self) -> Expr:
        return self._c("tan")

    def arcsin(self) -> Expr:
        return self._c("arcsin")

    def arccos(self) -> Expr:
        return self._c("arccos")

    def arctan(self) -> Expr:
        return self._c("arctan")

    def to_string(self) -> Expr:
        return self._c("to_string")


class _ListNs(_Ns):
    prefix = "list"

    def len(self) -> Expr:
        return self._c("len")

    def contains(self, item: Any) -> Expr:
        return self._c("contains", item)

    def at(self, index: Any) -> Expr:
        return self._c("at", index)

    def sum(self) -> Expr:
        return self._c("sum")

    def min(self) -> Expr:
        return self._c("min")

    def max(self) -> Expr:
        return self._c("max")

    def mean(self) -> Expr:
        return self._c("mean")

    def hasnull(self) -> Expr:
        return self._c("hasnull")

    def all(self) -> Expr:
        return self._c("all")

    def any(self) -> Expr:
        return self._c("any")

    def filter(self, var: builtins.str, predicate: Any) -> Expr:
        """The items for which ``predicate`` (over ``var(var)``, the item) is true."""
        name = _var_name(var, "list.filter")
        return self._c("filter", name, Expr(_expr_arg(predicate, "list.filter")))

    def map(self, var: builtins.str, expr: Any) -> Expr:
        """``expr`` (over ``var(var)``, the item) of each item."""
        name = _var_name(var, "list.map")
        return self._c("map", name, Expr(_expr_arg(expr, "list.map")))


class _StructNs(_Ns):
    prefix = "struct"

    def get(self, field: str) -> Expr:
        return self._c("get", field)


_EPOCH_UNITS = ("second", "millisecond", "microsecond")
_TIME_UNITS = (
    "year", "month", "week", "day", "hour", "minute", "second", "millisecond", "microsecond",
)  # fmt: skip


def _time_unit(unit: Any, where: str) -> builtins.str:
    if unit not in _TIME_UNITS:
        raise InvalidExprException(
            f"{where}: unit must be one of {', '.join(_TIME_UNITS)}, got {unit!r}"
        )
    return builtins.str(unit)


def var(name: builtins.str) -> Expr:
    """The item variable inside ``list.map``/``list.filter``: ``var("x") * 2``."""
    return Expr(spec.Var(_var_name(name, "var()")))


def struct_zip(struct_type: type, **fields: Any) -> Expr:
    """``MyStruct.zip(a=col("x"), b=col("y"))``: lists zipped item by item into a list of
    ``MyStruct`` (as long as the shortest list); a field left out is null."""
    if not fields:
        raise InvalidExprException(
            f"{getattr(struct_type, '__name__', struct_type)}.zip(): no lists given; pass a "
            "list expression per field"
        )
    dtype, args = _struct_fields(struct_type, fields, "zip")
    return Expr(spec.Call("zip", args, dtype))


def _struct_fields(
    struct_type: type, fields: dict[str, Any], call: str
) -> tuple[spec.StructType, tuple[spec.Expr, ...]]:
    """A struct call's type and its arguments: each field's name, then its expression."""
    dtype = to_dtype(struct_type, f"{call}(..., {getattr(struct_type, '__name__', struct_type)})")
    if not isinstance(dtype, spec.StructType):
        raise InvalidExprException(f"{call} needs a @struct class, got {struct_type!r}")
    known = {f.name for f in dtype.fields}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise InvalidExprException(
            f"{dtype.name}.{call}({', '.join(fields)}): {dtype.name} has no field "
            f"{', '.join(unknown)}; its fields: {', '.join(sorted(known))}"
        )
    args: list[spec.Expr] = []
    for name, value in fields.items():
        args += [spec.Lit(name), _expr_arg(value, f"{dtype.name}.{call}({name}=...)")]
    return dtype, tuple(args)


def make_struct(fields: dict[str, Any], type: type) -> Expr:  # noqa: A002 - Fennel's name
    """``make_struct({"a": col("x"), "b": 1}, MyStruct)``: a ``MyStruct`` per row from its
    fields' expressions (a field left out is null); ``MyStruct.expr(a=..., b=...)`` alike."""
    dtype, args = _struct_fields(type, fields, "make_struct")
    return Expr(spec.Call("make_struct", args, dtype))


def now() -> Expr:
    """The current time (a datetime), read when the expression is evaluated."""
    return Expr(spec.Call("now", ()))


def repeat(value: Any, by: Any) -> Expr:
    """A list holding ``value`` ``by`` times: ``repeat(col("x"), col("n"))``."""
    return Expr(spec.Call("repeat", (_ir(value), _ir(by))))


def datetime(  # noqa: PLR0913 - Fennel's signature
    year: int,
    month: int,
    day: int,
    hour: int = 0,
    minute: int = 0,
    second: int = 0,
    microsecond: int = 0,
    timezone: builtins.str | None = "UTC",
) -> Expr:
    """A datetime literal on ``timezone``'s wall clock: ``datetime(2024, 1, 1)``."""
    try:
        tz = zoneinfo.ZoneInfo(timezone or "UTC")
        moment = dt.datetime(year, month, day, hour, minute, second, microsecond, tzinfo=tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError) as e:
        raise InvalidExprException(
            f"datetime({year!r}, {month!r}, {day!r}, ..., timezone={timezone!r}): {e}"
        ) from e
    return lit(moment)


def from_epoch(value: Any, unit: str = "second") -> Expr:
    """Fennel's ``from_epoch(col("x"), unit="second")``: an int count since 1970 as a datetime."""
    if unit not in _EPOCH_UNITS:
        raise DeclarationError(
            f"from_epoch: unit must be one of {', '.join(_EPOCH_UNITS)}, got {unit!r}"
        )
    e = value if isinstance(value, Expr) else lit(value)
    return e._call("num.from_epoch", unit)


def col(name: str) -> Expr:
    return Expr(spec.Col(name))


def lit(value: Any, type: Any = None) -> Expr:  # noqa: A002 - Fennel's keyword
    dtype = to_dtype(type, "lit()") if type is not None else None
    if isinstance(value, dt.datetime):
        ts = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return Expr(spec.Lit(ts.isoformat(), dtype or spec.TimestampType()))
    if isinstance(value, dt.date):
        return Expr(spec.Lit(value.isoformat(), dtype or spec.DateType()))
    if value is None or isinstance(value, bool | int | float | str):
        return Expr(spec.Lit(value, dtype))
    raise DeclarationError(
        f"lit({value!r}): literals are None, bool, int, float, str, date or datetime"
    )


class _When:
    def __init__(self, cases: tuple[tuple[spec.Expr, spec.Expr], ...], cond: spec.Expr) -> None:
        self._cases, self._cond = cases, cond

    def _incomplete(self, *args: Any, **kwargs: Any) -> Any:
        raise InvalidExprException(
            "when(...) needs .then(value) (and optionally .otherwise(value)) to be an expression"
        )

    typeof = eval = matches_type = to_ir = _incomplete

    def then(self, value: Any) -> _Then:
        return _Then((*self._cases, (self._cond, _ir(value))))


class _Then(Expr):
    __slots__ = ("_cases",)

    def __init__(self, cases: tuple[tuple[spec.Expr, spec.Expr], ...]) -> None:
        super().__init__(spec.When(cases, spec.Lit(None)))
        self._cases = cases

    def when(self, cond: Any) -> _When:
        return _When(self._cases, _ir(cond))

    def otherwise(self, value: Any) -> Expr:
        return Expr(spec.When(self._cases, _ir(value)))


def when(cond: Any) -> _When:
    return _When((), _ir(cond))
