"""Python type annotations -> IR dtypes; Fennel's ``struct``, ``Embedding`` and restrictions."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import types
import typing
from typing import Any

import pandas as pd

from fennel_dagster.declare.errors import DeclarationError
from fennel_dagster.wire import spec
from fennel_dagster.wire.usercode import SHIPPED_MODULE


@dataclasses.dataclass(frozen=True)
class Embedding:
    """``Embedding[32]``: a fixed-size float vector."""

    dim: int

    def __class_getitem__(cls, dim: int) -> Embedding:
        return Embedding(dim)


@dataclasses.dataclass(frozen=True)
class Decimal:
    """``Decimal[2]``: a decimal with ``scale`` digits after the point."""

    scale: int

    def __class_getitem__(cls, scale: int) -> Decimal:
        return Decimal(scale)


@dataclasses.dataclass(frozen=True)
class between:  # noqa: N801 - Fennel's public name
    dtype: type
    min: float
    max: float
    strict_min: bool = False
    strict_max: bool = False


@dataclasses.dataclass(frozen=True)
class oneof:  # noqa: N801
    dtype: type
    options: tuple[Any, ...] | list[Any]


@dataclasses.dataclass(frozen=True)
class regex:  # noqa: N801
    pattern: str


def decimal_of(value: Any, scale: int) -> decimal.Decimal | None:
    """``value`` as a decimal of ``scale`` digits after the point (a float sum of decimals,
    0.30000000000000004, is the 0.30 it stands for); None for a missing value."""
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return None
    exact = value if isinstance(value, decimal.Decimal) else decimal.Decimal(str(value))
    return exact.quantize(decimal.Decimal(1).scaleb(-scale), rounding=decimal.ROUND_HALF_EVEN)


_STRUCTS: dict[str, type] = {}  # struct name -> class, for ``python_type``


def struct(cls: type) -> type:
    """Mark a class of annotated fields as a struct type usable in dataset fields."""
    cls.__fennel_struct__ = True  # type: ignore[attr-defined]
    out: type = dataclasses.dataclass(cls)
    # a struct shipped with user code and defined again where it runs does not replace the
    # class declared under its name in this process (values would stop comparing equal)
    if cls.__module__ != SHIPPED_MODULE or cls.__name__ not in _STRUCTS:
        _STRUCTS[cls.__name__] = out
    out.zip = classmethod(_zip)  # type: ignore[attr-defined]  # Fennel's MyStruct.zip(a=..., b=...)
    out.expr = classmethod(_expr)  # type: ignore[attr-defined]  # Fennel's MyStruct.expr(a=...)
    out.as_json = as_json  # type: ignore[attr-defined]  # Fennel's value.as_json()
    return out


def declared_struct(name: str) -> type | None:
    """The ``@struct`` class declared under ``name`` in this process, if any."""
    return _STRUCTS.get(name)


def struct_fields(value: Any) -> dict[str, Any] | None:
    """A ``@struct`` instance's fields (a Window from ``bucketize``, a user's struct), None
    for any other value: structs travel as objects of their fields."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return None


def as_json(value: Any) -> Any:
    """A struct value as a dict of its fields (nested structs, lists and dicts too), as
    Fennel's ``as_json`` gives it: times stay datetimes."""
    if (fields := struct_fields(value)) is not None:
        return {k: as_json(v) for k, v in fields.items()}
    if isinstance(value, list | tuple):
        return [as_json(v) for v in value]
    if isinstance(value, dict):
        return {k: as_json(v) for k, v in value.items()}
    return value


def _expr(cls: type, **fields: Any) -> Any:
    from fennel_dagster.declare.expr import make_struct  # expr imports this module

    return make_struct(fields, cls)


def _zip(cls: type, **fields: Any) -> Any:
    from fennel_dagster.declare.expr import struct_zip  # expr imports this module

    return struct_zip(cls, **fields)


@struct
class Window:
    """Fennel's window dtype: the events in ``[begin, end)``, the type of a window column."""

    begin: dt.datetime
    end: dt.datetime


_SIMPLE: dict[Any, spec.DType] = {
    int: spec.IntType(),
    float: spec.FloatType(),
    bool: spec.BoolType(),
    str: spec.StringType(),
    bytes: spec.BytesType(),
    dt.datetime: spec.TimestampType(),
    dt.date: spec.DateType(),
}


def to_dtype(tp: Any, where: str) -> spec.DType:
    """The IR dtype of annotation ``tp``; ``where`` names the field for error messages."""
    if isinstance(tp, type) and tp in _SIMPLE:
        return _SIMPLE[tp]
    if tp is decimal.Decimal:
        return spec.DecimalType(scale=2)
    if isinstance(tp, Decimal):
        return spec.DecimalType(scale=tp.scale)
    if isinstance(tp, Embedding):
        return spec.EmbeddingType(dim=tp.dim)
    if isinstance(tp, between):
        base = to_dtype(tp.dtype, where)
        if not isinstance(base, spec.IntType | spec.FloatType):
            raise DeclarationError(f"{where}: between() needs int or float, got {tp.dtype!r}")
        return spec.BetweenType(base, float(tp.min), float(tp.max), tp.strict_min, tp.strict_max)
    if isinstance(tp, oneof):
        base = to_dtype(tp.dtype, where)
        if not isinstance(base, spec.IntType | spec.StringType):
            raise DeclarationError(f"{where}: oneof() needs int or str, got {tp.dtype!r}")
        return spec.OneOfType(base, tuple(tp.options))
    if isinstance(tp, regex):
        return spec.RegexType(tp.pattern)
    if isinstance(tp, type) and getattr(tp, "__fennel_struct__", False):
        hints = typing.get_type_hints(tp)
        fields = tuple(spec.StructField(n, to_dtype(t, f"{where}.{n}")) for n, t in hints.items())
        return spec.StructType(tp.__name__, fields)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            return spec.OptionalType(to_dtype(rest[0], where))
        raise DeclarationError(f"{where}: unions other than Optional[T] are not supported: {tp!r}")
    if origin in (list, typing.List):  # noqa: UP006
        return spec.ListType(to_dtype(args[0], where))
    if origin in (dict, typing.Dict):  # noqa: UP006
        if args[0] is not str:
            raise DeclarationError(f"{where}: Dict keys must be str, got {args[0]!r}")
        return spec.MapType(to_dtype(args[1], where))
    raise DeclarationError(
        f"{where}: unsupported type {tp!r}; use int, float, bool, str, bytes, datetime, date, "
        "Decimal[n], Embedding[n], Optional/List/Dict of those, a @struct, between, oneof or regex"
    )


def python_type(t: spec.DType) -> Any:
    """The annotation a user writes for ``t`` (the inverse of ``to_dtype``), as Fennel's
    ``Expr.typeof`` answers it: ``int``, ``Optional[float]``, ``List[str]``, a struct class."""
    match t:
        case spec.OptionalType(inner):
            return typing.Optional[python_type(inner)]  # noqa: UP045 - Fennel compares so
        case spec.ListType(inner):
            return typing.List[python_type(inner)]  # type: ignore[misc]  # noqa: UP006
        case spec.MapType(value):
            return typing.Dict[str, python_type(value)]  # type: ignore[misc]  # noqa: UP006
        case spec.StructType(name, _):
            return _STRUCTS.get(name, dict)
        case spec.DecimalType(scale):
            return Decimal(scale)
        case spec.EmbeddingType(dim):
            return Embedding(dim)
        case spec.BetweenType() | spec.OneOfType():
            return python_type(t.of)
        case spec.RegexType():
            return str
    for py, dtype in _SIMPLE.items():
        if dtype == t:
            return py
    raise TypeError(f"no Python type for {t!r}")


def is_optional(t: spec.DType) -> bool:
    return isinstance(t, spec.OptionalType)


def render(t: spec.DType) -> str:
    """A dtype as the user would write it (for error messages)."""
    match t:
        case spec.IntType():
            return "int"
        case spec.FloatType():
            return "float"
        case spec.BoolType():
            return "bool"
        case spec.StringType():
            return "str"
        case spec.BytesType():
            return "bytes"
        case spec.TimestampType():
            return "datetime"
        case spec.DateType():
            return "date"
        case spec.DecimalType(scale=s):
            return f"Decimal[{s}]"
        case spec.OptionalType(of=o):
            return f"Optional[{render(o)}]"
        case spec.ListType(of=o):
            return f"List[{render(o)}]"
        case spec.MapType(of=o):
            return f"Dict[str, {render(o)}]"
        case spec.EmbeddingType(dim=d):
            return f"Embedding[{d}]"
        case spec.StructType(name=n):
            return n
        case spec.BetweenType(of=o, min=lo, max=hi):
            return f"between({render(o)}, {lo}, {hi})"
        case spec.OneOfType(of=o, options=opts):
            return f"oneof({render(o)}, {list(opts)})"
        case spec.RegexType(pattern=p):
            return f"regex({p!r})"
    return repr(t)
