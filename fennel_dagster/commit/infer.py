"""Schema inference through every operator, and expression typing.

``infer_pipeline`` walks a pipeline's DAG and returns the schema of its output (fields with
key and timestamp flags) or the list of problems found on the way, each pinned to its node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from fennel_dagster.commit.errors import ValidationError
from fennel_dagster.declare.dtypes import render
from fennel_dagster.wire import spec

Schema = list[spec.FieldSpec]


class TypeErrorInExpr(ValueError):
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
            return {
                bool: spec.BoolType(),
                int: spec.IntType(),
                float: spec.FloatType(),
                str: spec.StringType(),
            }[type(v)]
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
        if not (_numeric(ts[0]) and _numeric(ts[1])):
            if fn == "sub" and all(
                isinstance(base(strip_optional(t)), spec.TimestampType) for t in ts
            ):
                return _wrap(spec.IntType(), *ts)
            raise TypeErrorInExpr(f"{fn} needs numbers, got {render(ts[0])} and {render(ts[1])}")
        floats = any(isinstance(base(strip_optional(t)), spec.FloatType) for t in ts)
        result: spec.DType = spec.FloatType() if floats or fn == "truediv" else spec.IntType()
        if fn in ("truediv", "floordiv", "mod"):
            return optional(result)  # division by zero gives null
        return _wrap(result, *ts)
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


def infer_pipeline(
    p: spec.PipelineSpec, datasets: Mapping[str, spec.DatasetSpec]
) -> tuple[Schema | None, list[ValidationError]]:
    entity = f"{p.dataset}.{p.name}"
    schemas: dict[str, Schema] = {}
    errors: list[ValidationError] = []

    def err(node: spec.Node, message: str, fix: str) -> None:
        errors.append(ValidationError(entity, f"{_op(node)} {node.id}", message, fix))

    for node in p.nodes:
        try:
            schemas[node.id] = _infer_node(node, schemas, datasets, err)
        except TypeErrorInExpr as e:
            err(node, str(e), "fix the expression or the columns it reads")
            return None, errors
        except _Stop:
            return None, errors
    return (schemas.get(p.output), errors) if not errors else (None, errors)


def node_schemas(
    p: spec.PipelineSpec, datasets: Mapping[str, spec.DatasetSpec]
) -> dict[str, Schema]:
    """The schema flowing out of every node of a valid pipeline (the engine decodes
    intermediate rows, e.g. a repartition topic's, with these)."""
    schemas: dict[str, Schema] = {}
    problems: list[str] = []

    def err(node: spec.Node, message: str, fix: str) -> None:
        problems.append(f"{_op(node)} {node.id}: {message}")

    for node in p.nodes:
        schemas[node.id] = _infer_node(node, schemas, datasets, err)
    if problems:
        raise ValueError(f"pipeline {p.dataset}.{p.name} is not valid: {'; '.join(problems)}")
    return schemas


class _Stop(Exception):
    pass


def _op(node: spec.Node) -> str:
    return type(node).__name__.removesuffix("Node").lower()


def _infer_node(
    node: spec.Node,
    schemas: dict[str, Schema],
    datasets: Mapping[str, spec.DatasetSpec],
    err: Callable[[spec.Node, str, str], None],
) -> Schema:
    if isinstance(node, spec.InputNode):
        ds = datasets.get(node.dataset)
        if ds is None:
            err(
                node,
                f"input dataset {node.dataset} is not part of this commit",
                f"add {node.dataset} to the commit",
            )
            raise _Stop
        return list(ds.fields)
    if isinstance(node, spec.UnionNode):
        first = schemas[node.inputs[0]]
        for other in node.inputs[1:]:
            if _shape(schemas[other]) != _shape(first):
                err(
                    node,
                    "the streams of a union have different schemas",
                    "select/rename/assign them to the same fields first",
                )
                raise _Stop
        return first
    src = schemas[node.input]
    types = {f.name: f.dtype for f in src}
    names = [f.name for f in src]
    stamps = [f.name for f in src if f.timestamp]
    if len(stamps) != 1:
        err(
            node,
            f"its input has {len(stamps)} timestamp fields",
            "give the input dataset exactly one timestamp field",
        )
        raise _Stop
    ts = stamps[0]
    keys = [f.name for f in src if f.key]

    def need(cols: tuple[str, ...] | list[str], what: str) -> None:
        missing = [c for c in cols if c not in types]
        if missing:
            err(node, f"{what} {', '.join(repr(m) for m in missing)} not in the input (columns: {', '.join(names)})",
                "use an existing column or add it with assign() first")  # fmt: skip
            raise _Stop

    match node:
        case spec.FilterNode(predicate=pred):
            if pred is not None and not isinstance(
                base(strip_optional(type_of(pred, types))), spec.BoolType
            ):
                err(
                    node,
                    "the filter expression is not boolean",
                    "compare or test a column, e.g. col('x') > 0",
                )
            return src
        case spec.AssignNode(columns=cols):
            out = [f for f in src if f.name not in {c.name for c in cols}]
            for c in cols:
                if c.name in (ts, *keys):
                    err(node, f"assign() overwrites the {'timestamp' if c.name == ts else 'key'} field {c.name!r}",
                        "assign to a new field name instead")  # fmt: skip
                if c.expr is not None:
                    got = type_of(c.expr, types)
                    if not same_type(got, c.dtype) and not same_type(strip_optional(got), c.dtype):
                        err(node, f"'{c.name}' is declared {render(c.dtype)} but the expression gives {render(got)}",
                            f"end the expression with .astype({render(got)}) or fix it")  # fmt: skip
                out.append(spec.FieldSpec(c.name, c.dtype))
            return out
        case spec.TransformNode(schema=schema):
            declared = {f.name for f in schema}
            if ts not in declared or any(k not in declared for k in keys):
                err(node, "the transform's schema drops the timestamp or a key field",
                    f"include {', '.join([ts, *keys])} in schema=")  # fmt: skip
            return [replace(f, key=f.name in keys, timestamp=f.name == ts) for f in schema]
        case spec.JoinNode(right=right, left_on=lo, right_on=ro, how=how, fields=wanted):
            need(lo, "join column(s)")
            rds = datasets.get(right)
            if rds is None:
                err(
                    node,
                    f"joined dataset {right} is not part of this commit",
                    f"add {right} to the commit",
                )
                raise _Stop
            if not rds.keys:
                err(node, f"{right} has no key fields, so it cannot be the right side of a join",
                    f"declare {right}'s keys with field(key=True)")  # fmt: skip
                raise _Stop
            if sorted(ro) != sorted(rds.keys):
                err(node, f"join on {list(ro)} but {right} is keyed by {list(rds.keys)}",
                    f"join on exactly {right}'s keys: on={list(rds.keys)} (or left_on=/right_on=)")  # fmt: skip
                raise _Stop
            rtypes = {f.name: f.dtype for f in rds.fields}
            for left_col, right_col in zip(lo, ro, strict=True):
                lt = types[left_col]
                if isinstance(lt, spec.OptionalType):
                    err(
                        node,
                        f"join column {left_col!r} is Optional",
                        f"dropnull({left_col!r}) before the join",
                    )
                elif not same_type(lt, rtypes[right_col]):
                    err(node, f"join column {left_col!r} is {render(lt)} but {right}.{right_col} is {render(rtypes[right_col])}",
                        f"cast it with assign({left_col}=col({left_col!r}).astype(...))")  # fmt: skip
            bring = list(wanted) or [f.name for f in rds.fields if not f.key and not f.timestamp]
            unknown = [c for c in bring if c not in rtypes]
            if unknown:
                err(
                    node,
                    f"fields {unknown} are not in {right}",
                    f"choose from {[f.name for f in rds.fields]}",
                )
                raise _Stop
            clash = [c for c in bring if c in types]
            if clash:
                err(
                    node,
                    f"joined fields {clash} already exist in the stream",
                    "rename or drop them before the join",
                )
                raise _Stop
            out = list(src)
            for c in bring:
                t = rtypes[c]
                out.append(spec.FieldSpec(c, optional(t) if how == "left" else t))
            return out
        case spec.AggregateNode(keys=gkeys, aggs=aggs, along=along):
            need(gkeys, "groupby key(s)")
            kinds = {a.window.kind in ("continuous", "forever") for a in aggs}
            if len(kinds) > 1:
                err(node, "mixes continuous and tumbling/hopping/session windows",
                    "split the aggregate into two pipelines, one per window kind")  # fmt: skip
            for k in gkeys:
                if isinstance(types[k], spec.OptionalType):
                    err(node, f"groupby key {k!r} is Optional", f"dropnull({k!r}) before groupby")
            out = [spec.FieldSpec(k, types[k], key=True) for k in gkeys]
            for a in aggs:
                out.append(spec.FieldSpec(a.into, agg_type(a, types)))
                if a.window.kind == "session" and not a.window.gap:
                    err(
                        node,
                        f"'{a.into}' uses a Session window without a gap",
                        "give Session('30m')-style gap",
                    )
            out.append(spec.FieldSpec(along or ts, spec.TimestampType(), timestamp=True))
            return out
        case spec.FirstNode(keys=gkeys) | spec.LatestNode(keys=gkeys):
            need(gkeys, "groupby key(s)")
            return [replace(f, key=f.name in gkeys) for f in src]
        case spec.DedupNode(by=by):
            need(by, "dedup column(s)")
            return src
        case spec.ExplodeNode(columns=cols):
            need(cols, "explode column(s)")
            out = []
            for f in src:
                if f.name in cols:
                    inner = base(strip_optional(f.dtype))
                    if not isinstance(inner, spec.ListType):
                        err(
                            node,
                            f"explode column {f.name!r} is {render(f.dtype)}, not a list",
                            "explode only List fields",
                        )
                        raise _Stop
                    out.append(spec.FieldSpec(f.name, optional(inner.of)))
                else:
                    out.append(f)
            return out
        case spec.DropNode(columns=cols):
            need(cols, "dropped column(s)")
            protected = [c for c in cols if c == ts or c in keys]
            if protected:
                err(
                    node,
                    f"drops the key/timestamp field(s) {protected}",
                    "keep them; drop other fields",
                )
            return [f for f in src if f.name not in cols]
        case spec.DropNullNode(columns=cols):
            need(cols, "dropnull column(s)")
            targets = set(cols) or {f.name for f in src if isinstance(f.dtype, spec.OptionalType)}
            return [
                replace(f, dtype=strip_optional(f.dtype)) if f.name in targets else f for f in src
            ]
        case spec.SelectNode(columns=cols):
            need(cols, "selected column(s)")
            keep = set(cols) | {ts} | set(keys)
            return [f for f in src if f.name in keep]
        case spec.RenameNode(mapping=mapping):
            need([old for old, _ in mapping], "renamed column(s)")
            m = dict(mapping)
            return [replace(f, name=m.get(f.name, f.name)) for f in src]
        case spec.ChangelogNode(delete_column=col):
            if not keys:
                err(node, "changelog() needs a keyed input", "apply it to a keyed dataset")
            return [replace(f, key=False) for f in src] + [spec.FieldSpec(col, spec.BoolType())]
    raise _Stop


def _shape(schema: Schema) -> list[tuple[str, str, bool, bool]]:
    return sorted((f.name, render(f.dtype), f.key, f.timestamp) for f in schema)
