"""Expression and aggregation typing, shared by ``infer`` and the operator rules (``infer_nodes``).

``type_of`` gives the type of an expression over a row's column types, ``agg_type`` the type of
an aggregation's output column; both raise ``TypeErrorInExpr`` when the types do not fit, so an
ill-typed expression is rejected at commit instead of failing on the first rows it meets.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import NoReturn

from fennel_dagster.declare.dtypes import render
from fennel_dagster.errors import CommitError
from fennel_dagster.wire import spec


class TypeErrorInExpr(CommitError, ValueError):
    """An expression that does not type; ``fix`` is the advice (empty: the caller's default)."""

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.fix = fix


class UnknownColumn(TypeErrorInExpr):
    """The expression reads a column the schema does not have."""


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


def _core(t: spec.DType) -> spec.DType:
    return base(strip_optional(t))


def _numeric(t: spec.DType, decimal: bool = False) -> bool:
    """An int or a float (or, where ``decimal``, a Decimal: aggregations read it as a float
    and give a Decimal of its scale back where their type is the column's)."""
    number = (
        (spec.IntType, spec.FloatType, spec.DecimalType)
        if decimal
        else (spec.IntType, spec.FloatType)
    )
    return isinstance(_core(t), number)


def _like(a: spec.DType, b: spec.DType) -> bool:
    """Whether values of ``a`` and ``b`` compare: int with float yes, str with int no."""
    a2, b2 = _core(a), _core(b)
    number = spec.IntType | spec.FloatType | spec.DecimalType
    if isinstance(a2, number) and isinstance(b2, number):
        return True
    if isinstance(a2, spec.ListType | spec.MapType) and isinstance(
        b2, spec.ListType | spec.MapType
    ):
        return type(a2) is type(b2) and _like(a2.of, b2.of)
    if isinstance(a2, spec.StructType) and isinstance(b2, spec.StructType):
        return a2.name == b2.name
    return type(a2) is type(b2)


def _is(*kinds: type) -> Callable[[spec.DType], bool]:
    return lambda t: isinstance(_core(t), kinds)


def _is_null(e: spec.Expr) -> bool:
    """An untyped ``None`` literal: it fits any operand."""
    return isinstance(e, spec.Lit) and e.value is None and e.dtype is None


def _wrap(result: spec.DType, *args: spec.DType) -> spec.DType:
    return optional(result) if any(isinstance(a, spec.OptionalType) for a in args) else result


# --------------------------------------------------------------------------- rendering

_ARITH = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "truediv": "/",
    "floordiv": "//",
    "mod": "%",
    "pow": "**",
}
_COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_INFIX = _ARITH | _COMPARE | {"and": "&", "or": "|"}
_PROPERTIES = {"dt.year", "dt.month", "dt.day", "dt.hour", "dt.minute", "dt.second", "dt.day_of_week"}  # fmt: skip


def show(e: spec.Expr) -> str:
    """An expression as the user wrote it, e.g. ``col("channel") > 5`` (for error messages)."""

    def operand(a: spec.Expr) -> str:
        infix = isinstance(a, spec.Call) and a.fn in _INFIX
        return f"({show(a)})" if infix else show(a)

    match e:
        case spec.Col(name=n):
            return f"col({json.dumps(n)})"
        case spec.Var(name=n):
            return f"var({json.dumps(n)})"
        case spec.Call(fn="now", args=()):
            return "now()"
        case spec.Call(fn="repeat", args=(value, by)):
            return f"repeat({show(value)}, {show(by)})"
        case spec.Call(fn="make_struct", args=args, dtype=d):
            pairs = zip(args[::2], args[1::2], strict=True)
            named = ", ".join(
                f"{json.dumps(n.value if isinstance(n, spec.Lit) else str(n))}: {show(v)}"
                for n, v in pairs
            )
            return f"make_struct({{{named}}}, {render(d) if d is not None else 'struct'})"
        case spec.Call(fn="zip", args=args, dtype=d):
            pairs = zip(args[::2], args[1::2], strict=True)
            named = ", ".join(
                f"{n.value if isinstance(n, spec.Lit) else n}={show(v)}" for n, v in pairs
            )
            return f"{render(d) if d is not None else 'struct'}.zip({named})"
        case spec.Lit(value=v, dtype=d):
            text = json.dumps(v) if isinstance(v, str) else repr(v)
            return f"lit({text}, {render(d)})" if d is not None else text
        case spec.When(cases=cases, otherwise=other):
            chain = ".".join(f"when({show(c)}).then({show(v)})" for c, v in cases)
            return chain if _is_null(other) else f"{chain}.otherwise({show(other)})"
        case spec.Call(fn=fn, args=args, dtype=d):
            if fn in _INFIX:
                return f"{operand(args[0])} {_INFIX[fn]} {operand(args[1])}"
            if fn in ("neg", "not"):
                return f"{'-' if fn == 'neg' else '~'}{operand(args[0])}"
            params = [show(a) for a in args[1:]] + ([render(d)] if d is not None else [])
            call = fn if fn in _PROPERTIES else f"{fn}({', '.join(params)})"
            return f"{operand(args[0])}.{call}"
    return repr(e)


# --------------------------------------------------------------------------- typing


def type_of(e: spec.Expr, schema: Mapping[str, spec.DType]) -> spec.DType:
    match e:
        case spec.Col(name=n):
            if n not in schema:
                names = ", ".join(c for c in schema if not c.startswith(spec.var_key("")))
                raise UnknownColumn(f"column {n!r} does not exist (columns: {names})")
            return schema[n]
        case spec.Var(name=n):
            if spec.var_key(n) not in schema:
                raise TypeErrorInExpr(f"{show(e)} is not bound here",
                                      f'use var({json.dumps(n)}) inside col(...).list.map({json.dumps(n)}, ...) or .list.filter({json.dumps(n)}, ...)')  # fmt: skip
            return schema[spec.var_key(n)]
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
        case spec.When():
            return _when_type(e, schema)
        case spec.Call(fn="now"):
            return spec.TimestampType()
        case spec.Call(fn="repeat"):
            return _repeat_type(e, [type_of(a, schema) for a in e.args])
        case spec.Call(fn="list.map" | "list.filter"):
            return _lambda_type(e, schema)
        case spec.Call(fn="zip"):
            return _zip_type(e, schema)
        case spec.Call(fn="make_struct"):
            return _make_struct_type(e, schema)
        case spec.Call():
            ts = [type_of(a, schema) for a in e.args]
            _check_operands(e, ts)
            return _call_type(e, ts)
    raise TypeErrorInExpr(f"not an expression: {e!r}")


def _repeat_type(e: spec.Call, ts: list[spec.DType]) -> spec.DType:
    """``repeat(value, by)``: a list of ``by`` copies of ``value`` (null if ``by`` is)."""
    if not (_is_null(e.args[1]) or _INT(ts[1])):
        raise TypeErrorInExpr(f"{show(e)} repeats a value {render(ts[1])} times",
                              "give the count as an int, e.g. repeat(col(\"x\"), 3)")  # fmt: skip
    return _wrap(spec.ListType(ts[0]), ts[1])


def _make_struct_type(e: spec.Call, schema: Mapping[str, spec.DType]) -> spec.DType:
    """``make_struct({...}, MyStruct)``: a ``MyStruct`` from values of its fields' types (a
    field not given, or given a null, must be Optional); never null itself."""
    st = e.dtype
    if not isinstance(st, spec.StructType):
        raise TypeErrorInExpr(f"{show(e)} has no struct type", "pass a @struct class")
    given: set[str] = set()
    for n, v in zip(e.args[::2], e.args[1::2], strict=True):
        name = n.value if isinstance(n, spec.Lit) else None
        t = type_of(v, schema)
        field = next((f for f in st.fields if f.name == name), None)
        if field is None:
            raise TypeErrorInExpr(f"{show(e)}: {st.name} has no field {name}",
                                  f"give only fields of {st.name}")  # fmt: skip
        optional = isinstance(field.dtype, spec.OptionalType)
        if not _holds(field.dtype, t):
            raise TypeErrorInExpr(f"{show(e)} fills {st.name}.{name} ({render(field.dtype)}) with a {render(t)}",
                                  f"give {name} a {render(field.dtype)}"
                                  + ("" if optional else " (fillnull a nullable value first)"))  # fmt: skip
        given.add(field.name)
    _all_required(e, st, given, "a value")
    return st


def _holds(field: spec.DType, t: spec.DType) -> bool:
    """Whether a struct field of type ``field`` takes values of type ``t`` (a nullable one
    only if the field is Optional)."""
    optional = isinstance(field, spec.OptionalType)
    return _like(t, field) and (optional or not isinstance(t, spec.OptionalType))


def _all_required(e: spec.Call, st: spec.StructType, given: Iterable[str], what: str) -> None:
    """Refuses a struct built without a value for each of its non-Optional fields."""
    named = set(given)
    missing = [f.name for f in st.fields
               if f.name not in named and not isinstance(f.dtype, spec.OptionalType)]  # fmt: skip
    if missing:
        raise TypeErrorInExpr(f"{show(e)} leaves out {', '.join(missing)}",
                              f"give every non-Optional field of {st.name} {what}")  # fmt: skip


def _zip_type(e: spec.Call, schema: Mapping[str, spec.DType]) -> spec.DType:
    """``MyStruct.zip(a=..., b=...)``: a list of ``MyStruct`` from lists of its fields' types
    (a field not given must be Optional); null if any list is."""
    st = e.dtype
    if not isinstance(st, spec.StructType):
        raise TypeErrorInExpr(f"{show(e)} has no struct type", "call .zip on a @struct class")
    given: dict[str, spec.DType] = {}
    for n, v in zip(e.args[::2], e.args[1::2], strict=True):
        name = n.value if isinstance(n, spec.Lit) else None
        t = type_of(v, schema)
        field = next((f for f in st.fields if f.name == name), None)
        core = _core(t)
        if field is None or not isinstance(core, spec.ListType):
            raise TypeErrorInExpr(f"{show(e)} gives {name}={render(t)}, not a list of a {st.name} field",
                                  f"give each field of {st.name} a list of its type")  # fmt: skip
        if not _holds(field.dtype, core.of):
            raise TypeErrorInExpr(f"{show(e)} fills {st.name}.{name} ({render(field.dtype)}) from a {render(t)}",
                                  f"give {name} a list of {render(field.dtype)}")  # fmt: skip
        given[str(name)] = t
    _all_required(e, st, given, "a list")
    return _wrap(spec.ListType(st), *given.values())


def _lambda_type(e: spec.Call, schema: Mapping[str, spec.DType]) -> spec.DType:
    """``list.map(var, body)`` / ``list.filter(var, predicate)``: the body typed with the
    variable bound to the list's item type."""
    lt = type_of(e.args[0], schema)
    core = _core(lt)
    if not isinstance(core, spec.ListType):
        raise TypeErrorInExpr(f"{show(e)} needs a list, got {render(lt)}",
                              "apply it to a list column, or cast first with .astype(...)")  # fmt: skip
    name = e.args[1].value if isinstance(e.args[1], spec.Lit) else None
    if not isinstance(name, str):
        raise TypeErrorInExpr(f"{show(e)} names no variable", 'name it, e.g. .list.map("x", var("x") * 2)')  # fmt: skip
    body = type_of(e.args[2], {**schema, spec.var_key(name): core.of})
    if e.fn == "list.map":
        return _wrap(spec.ListType(body), lt)
    if not (_is_null(e.args[2]) or isinstance(_core(body), spec.BoolType)):
        raise TypeErrorInExpr(f"{show(e)} filters by {render(body)}, not bool",
                              f'make the predicate a condition, e.g. var({json.dumps(name)}) > 0')  # fmt: skip
    return _wrap(spec.ListType(core.of), lt)


def _when_type(e: spec.When, schema: Mapping[str, spec.DType]) -> spec.DType:
    """The first non-null branch's type, Optional if any branch may be null; the conditions
    must be bools and the branches like one another (int with float is fine)."""
    for c, _ in e.cases:
        t = type_of(c, schema)
        if not isinstance(_core(t), spec.BoolType):
            raise TypeErrorInExpr(f"the when() condition {show(c)} is {render(t)}, not bool",
                                  'make it a condition, e.g. col("x") > 0')  # fmt: skip
    values = [v for _, v in e.cases] + [e.otherwise]
    types = [type_of(v, schema) for v in values]
    typed = [(v, t) for v, t in zip(values, types, strict=True) if not _is_null(v)]
    if not typed:
        return spec.OptionalType(spec.IntType())
    first, result = typed[0]
    for v, t in typed[1:]:
        if not _like(result, t):
            raise TypeErrorInExpr(f"{show(e)} gives {render(result)} from {show(first)} but {render(t)} from {show(v)}",
                                  "give every branch the same type (cast one with .astype(...))")  # fmt: skip
    nullable = any(isinstance(t, spec.OptionalType) for t in types)
    return optional(strip_optional(result)) if nullable else strip_optional(result)


_STR, _INT, _BOOL, _TS = _is(spec.StringType), _is(spec.IntType), _is(spec.BoolType), _is(spec.TimestampType)  # fmt: skip
_FLOAT = _is(spec.FloatType)
# what a namespace's functions are applied to, the exceptions first
_RECEIVER: dict[str, tuple[Callable[[spec.DType], bool], str]] = {
    "str.json_extract": (lambda t: True, ""),
    "num.from_epoch": (_INT, "an int"),
    "dt.strftime": (_is(spec.TimestampType, spec.DateType), "a datetime or date"),
    "str": (_STR, "a str"),
    "dt": (_TS, "a datetime"),
    "num": (_numeric, "a number"),
    "list": (_is(spec.ListType), "a list"),
    "struct": (_is(spec.StructType), "a struct"),
}
# the second argument of these, when it is a value rather than a literal parameter
_SECOND: dict[str, tuple[Callable[[spec.DType], bool], str]] = {
    "str.contains": (_STR, "a str"), "str.startswith": (_STR, "a str"),
    "str.endswith": (_STR, "a str"), "str.concat": (_STR, "a str"),
    "dt.since": (_TS, "a datetime"), "list.at": (_INT, "an int"),
}  # fmt: skip


def _check_operands(e: spec.Call, ts: list[spec.DType]) -> None:
    """Reject operands the function cannot take: pandas/Spark would raise a raw TypeError on
    the first rows (or, worse, coerce silently). Untyped ``None`` literals fit anything."""
    fn, a = e.fn, ts[0]
    null = [_is_null(x) for x in e.args]

    def fits(i: int, test: Callable[[spec.DType], bool]) -> bool:
        return null[i] or test(ts[i])

    def fail(problem: str, fix: str) -> NoReturn:
        raise TypeErrorInExpr(f"{show(e)} {problem}", fix)

    if fn in _ARITH:
        if not (fits(0, _numeric) and fits(1, _numeric)):
            if fn == "sub" and fits(0, _TS) and fits(1, _TS):
                return
            fail(f"does arithmetic on {render(a)} and {render(ts[1])}",
                 "arithmetic needs numbers: cast with .astype(int) or .astype(float) (join text with .str.concat())")  # fmt: skip
        exponent = e.args[1]
        if (fn == "pow" and _INT(a) and _INT(ts[1]) and isinstance(exponent, spec.Lit)
                and isinstance(exponent.value, int) and exponent.value < 0):  # fmt: skip
            fail("raises an int to a negative int power",
                 "make the base or the exponent a float, e.g. lit(2.0) or .astype(float)")  # fmt: skip
    elif fn in _COMPARE:
        if not (null[0] or null[1] or _like(a, ts[1])):
            fail(
                f"compares {render(a)} with {render(ts[1])}",
                "cast one side or compare like with like",
            )
    elif fn in ("and", "or", "not"):
        if not all(fits(i, _BOOL) for i in range(len(ts))):
            fail(f"needs bools, got {' and '.join(render(t) for t in ts)}",
                 'make each operand a condition, e.g. col("x") > 0')  # fmt: skip
    elif fn == "neg" and not fits(0, _numeric):
        fail(f"needs a number, got {render(a)}", "cast it with .astype(int) or .astype(float)")
    elif fn == "fillnull" and not (null[1] or _like(a, ts[1])):
        fail(f"fills {render(a)} with {render(ts[1])}", "fill with a value of the column's type")
    elif "." in fn:
        test, what = _RECEIVER.get(fn) or _RECEIVER.get(fn.split(".")[0], (lambda t: True, ""))
        if not fits(0, test):
            fail(f"needs {what}, got {render(a)}", "apply it to a column of that type, or cast first with .astype(...)")  # fmt: skip
        if fn in _SECOND and not fits(1, _SECOND[fn][0]):
            fail(f"needs {_SECOND[fn][1]} argument, got {render(ts[1])}", "pass a value of that type")  # fmt: skip
        _check_container(e, ts, fail)


def _check_container(
    e: spec.Call, ts: list[spec.DType], fail: Callable[[str, str], NoReturn]
) -> None:
    """What a list's items or a struct's fields must be for ``list.*``/``struct.get``."""
    core = _core(ts[0])
    if isinstance(core, spec.ListType):
        if e.fn in ("list.sum", "list.mean", "list.min", "list.max") and not _numeric(core.of):
            fail(
                f"needs a list of numbers, got {render(ts[0])}",
                "sum, average, min and max numeric lists only (cast the items first with .list.map)",
            )
        if e.fn in ("list.all", "list.any") and not _BOOL(core.of):
            fail(f"needs a list of bools, got {render(ts[0])}",
                 'turn the items into conditions first, e.g. .list.map("x", var("x") > 0)')  # fmt: skip
        if e.fn == "list.contains" and not (_is_null(e.args[1]) or _like(core.of, ts[1])):
            fail(f"looks for a {render(ts[1])} in a {render(ts[0])}", "look for a value of the item type")  # fmt: skip
    if isinstance(core, spec.StructType) and e.fn == "struct.get":
        name = e.args[1].value if isinstance(e.args[1], spec.Lit) else None
        if name not in {f.name for f in core.fields}:
            fail(f"reads a field {core.name} does not have (fields: {', '.join(f.name for f in core.fields)})",
                 "get an existing field")  # fmt: skip


def _call_type(e: spec.Call, ts: list[spec.DType]) -> spec.DType:
    """The result type of a call whose operands ``_check_operands`` accepted."""
    fn, a, dtype = e.fn, ts[0], e.dtype
    core = _core(a)
    if fn in _ARITH:
        return _arith_type(fn, ts, e.args[1])
    if fn in _COMPARE or fn in ("and", "or"):
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
        "num.from_epoch": spec.TimestampType,
        "num.sqrt": spec.FloatType, "num.log": spec.FloatType, "num.to_string": spec.StringType,
        "num.sin": spec.FloatType, "num.cos": spec.FloatType, "num.tan": spec.FloatType,
        "num.arcsin": spec.FloatType, "num.arccos": spec.FloatType, "num.arctan": spec.FloatType,
        "list.len": spec.IntType, "list.contains": spec.BoolType, "list.hasnull": spec.BoolType,
        "list.mean": lambda: spec.OptionalType(spec.FloatType()),
    }  # fmt: skip
    if fn in simple:
        return _wrap(simple[fn](), *ts)
    if fn == "num.abs":
        return a
    if fn == "num.round":  # round() gives an int, round(n) with n > 0 decimals a float
        decimals = e.args[1].value if len(e.args) > 1 and isinstance(e.args[1], spec.Lit) else 0
        return _wrap(spec.IntType() if not decimals else spec.FloatType(), a)
    if fn == "str.parse":
        if dtype is None:
            raise TypeErrorInExpr(f"{show(e)} has no target type", "pass one, e.g. .str.parse(int)")
        return _wrap(dtype, a)
    if fn in ("list.all", "list.any") and isinstance(core, spec.ListType):
        return _wrap(spec.BoolType(), a, core.of)
    if fn in ("list.at", "list.min", "list.max") and isinstance(core, spec.ListType):
        return optional(core.of)
    if fn == "list.sum" and isinstance(core, spec.ListType):
        return _wrap(core.of, a)
    if fn == "struct.get" and isinstance(core, spec.StructType):
        name = e.args[1].value if isinstance(e.args[1], spec.Lit) else None
        return _wrap(next(f.dtype for f in core.fields if f.name == name), a)
    if fn == "str.json_extract":
        return spec.OptionalType(spec.StringType())
    raise TypeErrorInExpr(f"function {fn} cannot be applied to {', '.join(render(t) for t in ts)}")


def _arith_type(fn: str, ts: list[spec.DType], divisor: spec.Expr) -> spec.DType:
    if not (_numeric(ts[0]) and _numeric(ts[1])):
        if fn == "sub" and all(isinstance(_core(t), spec.TimestampType) for t in ts):
            return _wrap(spec.IntType(), *ts)
        raise TypeErrorInExpr(f"{fn} needs numbers, got {render(ts[0])} and {render(ts[1])}")
    floats = any(isinstance(_core(t), spec.FloatType) for t in ts)
    result: spec.DType = spec.FloatType() if floats or fn == "truediv" else spec.IntType()
    constant = divisor.value if isinstance(divisor, spec.Lit) else None
    nonzero = isinstance(constant, int | float) and constant != 0  # never divides by zero
    if fn in ("truediv", "floordiv", "mod") and not nonzero:
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
            if not _numeric(of, decimal=True):
                raise TypeErrorInExpr(f"Sum of {agg.of!r} needs a number, got {render(of)}")
            return base(strip_optional(of))
        case "avg" | "stddev":
            assert of is not None
            if not _numeric(of, decimal=True):
                raise TypeErrorInExpr(f"{agg.kind} of {agg.of!r} needs a number, got {render(of)}")
            return (
                spec.FloatType() if agg.default is not None else spec.OptionalType(spec.FloatType())
            )
        case "min" | "max":
            assert of is not None
            t = base(strip_optional(of))
            if not (
                _numeric(t) or isinstance(t, spec.TimestampType | spec.DateType | spec.DecimalType)
            ):
                raise TypeErrorInExpr(
                    f"{agg.kind.title()} of {agg.of!r} needs a number, date or datetime, got "
                    f"{render(of)}"
                )
            return t if agg.default is not None else spec.OptionalType(t)
        case "quantile":
            assert of is not None
            if not _numeric(of, decimal=True):
                raise TypeErrorInExpr(
                    f"Cannot get quantile of field {agg.of} of type {render(of)}: Quantile "
                    "needs a number"
                )
            return (
                spec.FloatType() if agg.default is not None else spec.OptionalType(spec.FloatType())
            )
        case "lastk" | "firstk" | "distinct":
            assert of is not None
            inner = base(strip_optional(of)) if agg.dropnull else of
            return spec.ListType(base(inner) if not isinstance(inner, spec.OptionalType) else inner)
    raise TypeErrorInExpr(f"unknown aggregation {agg.kind}")
