"""The schema rule of every pipeline operator, one function per node type.

``infer_node`` looks the node's class up in ``_RULES`` and returns the schema flowing out of
the node. A rule reports problems through the ``err`` callback it is given; after a problem
that leaves no schema to go on with it raises ``Stop``. Expression typing errors
(``TypeErrorInExpr``) propagate to the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn, Protocol

from fennel_dagster.commit.infer_types import (
    agg_type,
    base,
    optional,
    same_type,
    show,
    strip_optional,
    type_of,
)
from fennel_dagster.declare.dtypes import render
from fennel_dagster.wire import spec

Schema = list[spec.FieldSpec]


class Report(Protocol):
    """Where a rule reports a problem: the message, its fix, and Fennel's words for it
    (``text``, empty where Fennel has none)."""

    def __call__(self, node: spec.Node, message: str, fix: str, text: str = "") -> None: ...


class Stop(Exception):
    """Inference cannot go past this node; the reason has been reported already."""


@dataclass(frozen=True)
class Ctx:
    """What a rule sees: the node, the schemas of the nodes before it, the commit's datasets."""

    node: spec.Node
    schemas: Mapping[str, Schema]
    datasets: Mapping[str, spec.DatasetSpec]
    err: Report
    nodes: Mapping[str, spec.Node] = field(default_factory=dict, kw_only=True)  # by id
    pipeline: str = field(default="", kw_only=True)  # the pipeline's name

    def report(self, message: str, fix: str, text: str = "") -> None:
        self.err(self.node, message, fix, text)

    def fennel_name(self, node_id: str) -> str | None:
        """How Fennel names the schema out of a node in its errors (None: unknown here)."""
        node = self.nodes.get(node_id)
        if isinstance(node, spec.InputNode):
            return f"'[Dataset:{node.dataset}]'"
        label = _FENNEL_LABELS.get(type(node)) if node is not None else None
        return f"'[Pipeline:{self.pipeline}]->{label} node'" if label else None

    def fail(self, message: str, fix: str) -> NoReturn:
        self.report(message, fix)
        raise Stop


@dataclass(frozen=True)
class Stream(Ctx):
    """The context of a single-input operator: its input schema, read once."""

    src: Schema
    types: dict[str, spec.DType]
    names: list[str]
    ts: str
    keys: list[str]

    def need(self, cols: tuple[str, ...] | list[str], what: str) -> None:
        missing = [c for c in cols if c not in self.types]
        if missing:
            self.fail(f"{what} {', '.join(repr(m) for m in missing)} not in the input (columns: {', '.join(self.names)})",
                      "use an existing column or add it with assign() first")  # fmt: skip


def _open_stream(node: Any, ctx: Ctx) -> Stream:
    src = ctx.schemas[node.input]
    stamps = [f.name for f in src if f.timestamp]
    if len(stamps) != 1:
        ctx.fail(
            f"its input has {len(stamps)} timestamp fields",
            "give the input dataset exactly one timestamp field",
        )
    return Stream(
        ctx.node,
        ctx.schemas,
        ctx.datasets,
        ctx.err,
        nodes=ctx.nodes,
        pipeline=ctx.pipeline,
        src=src,
        types={f.name: f.dtype for f in src},
        names=[f.name for f in src],
        ts=stamps[0],
        keys=[f.name for f in src if f.key],
    )


Rule = Callable[[Any, Ctx], Schema]


def _on_stream(rule: Callable[[Any, Stream], Schema]) -> Rule:
    """A rule for a single-input operator: its input must have exactly one timestamp field."""

    def run(node: Any, ctx: Ctx) -> Schema:
        return rule(node, _open_stream(node, ctx))

    return run


# --------------------------------------------------------------------------- sources


def _infer_input(node: spec.InputNode, ctx: Ctx) -> Schema:
    ds = ctx.datasets.get(node.dataset)
    if ds is None:
        ctx.fail(
            f"input dataset {node.dataset} is not part of this commit",
            f"add {node.dataset} to the commit",
        )
    return list(ds.fields)


def _infer_union(node: spec.UnionNode, ctx: Ctx) -> Schema:
    first = ctx.schemas[node.inputs[0]]
    for other in node.inputs[1:]:
        if _shape(ctx.schemas[other]) != _shape(first):
            ctx.fail(
                "the streams of a union have different schemas",
                "select/rename/assign them to the same fields first",
            )
    return first


def _shape(schema: Schema) -> list[tuple[str, str, bool, bool]]:
    return sorted((f.name, render(f.dtype), f.key, f.timestamp) for f in schema)


# --------------------------------------------------------------------------- row-wise


def _infer_filter(node: spec.FilterNode, s: Stream) -> Schema:
    pred = node.predicate
    if pred is not None:
        t = type_of(pred, s.types)
        if not isinstance(base(strip_optional(t)), spec.BoolType):
            s.report(
                f"the filter expression {show(pred)} is {render(t)}, not boolean",
                "compare or test a column, e.g. col('x') > 0",
            )
    return s.src


def _declares(got: spec.DType, declared: spec.DType) -> bool:
    plain_got, plain_declared = base(strip_optional(got)), base(strip_optional(declared))
    widens = {(spec.IntType, spec.FloatType), (spec.BoolType, spec.IntType)}
    return same_type(strip_optional(got), strip_optional(declared)) or (
        (type(plain_got), type(plain_declared)) in widens
    )


def _infer_assign(node: spec.AssignNode, s: Stream) -> Schema:
    cols = node.columns
    out = [f for f in s.src if f.name not in {c.name for c in cols}]
    for c in cols:
        if c.name in (s.ts, *s.keys):
            s.report(f"assign() overwrites the {'timestamp' if c.name == s.ts else 'key'} field {c.name!r}",
                     "assign to a new field name instead")  # fmt: skip
        if c.expr is not None:
            # as in Fennel, the closing .astype(T) declares the column's type: what it wraps
            # must already be a T (an int may widen to float, a bool to int): not a conversion
            declared = c.expr
            if isinstance(declared, spec.Call) and declared.fn == "astype" and declared.args:
                declared = declared.args[0]
            got = type_of(declared, s.types)
            if not _declares(got, c.dtype):
                s.report(f"'{c.name}' is declared {render(c.dtype)} but the expression gives {render(got)}",
                         f"declare it .astype({render(got)}), or compute a {render(c.dtype)} "
                         "(e.g. .num.round(), .num.to_string(), when(...).then(...))")  # fmt: skip
        out.append(spec.FieldSpec(c.name, c.dtype))
    return out


def _infer_transform(node: spec.TransformNode, s: Stream) -> Schema:
    declared = {f.name for f in node.schema}
    if s.ts not in declared or any(k not in declared for k in s.keys):
        s.report("the transform's schema drops the timestamp or a key field",
                 f"include {', '.join([s.ts, *s.keys])} in schema=")  # fmt: skip
    return [replace(f, key=f.name in s.keys, timestamp=f.name == s.ts) for f in node.schema]


def _infer_explode(node: spec.ExplodeNode, s: Stream) -> Schema:
    cols = node.columns
    s.need(cols, "explode column(s)")
    out: Schema = []
    for f in s.src:
        if f.name in cols:
            inner = base(strip_optional(f.dtype))
            if not isinstance(inner, spec.ListType):
                s.fail(
                    f"explode column {f.name!r} is {render(f.dtype)}, not a list",
                    "explode only List fields",
                )
            out.append(spec.FieldSpec(f.name, optional(inner.of)))
        else:
            out.append(f)
    return out


def _infer_changelog(node: spec.ChangelogNode, s: Stream) -> Schema:
    if not s.keys:
        s.report("changelog() needs a keyed input", "apply it to a keyed dataset")
    return [replace(f, key=False) for f in s.src] + [
        spec.FieldSpec(node.delete_column, spec.BoolType())
    ]


# --------------------------------------------------------------------------- join


def _infer_join(node: spec.JoinNode, s: Stream) -> Schema:
    right = node.right
    s.need(node.left_on, "join column(s)")
    rds = s.datasets.get(right)
    if rds is None:
        s.fail(f"joined dataset {right} is not part of this commit", f"add {right} to the commit")
    if not rds.keys:
        s.fail(f"{right} has no key fields, so it cannot be the right side of a join",
               f"declare {right}'s keys with field(key=True)")  # fmt: skip
    if sorted(node.right_on) != sorted(rds.keys):
        s.fail(f"join on {list(node.right_on)} but {right} is keyed by {list(rds.keys)}",
               f"join on exactly {right}'s keys: on={list(rds.keys)} (or left_on=/right_on=)")  # fmt: skip
    rtypes = {f.name: f.dtype for f in rds.fields}
    _check_join_columns(node, s, rtypes)
    bring = list(node.fields) or [f.name for f in rds.fields if not f.key and not f.timestamp]
    unknown = [c for c in bring if c not in rtypes]
    if unknown:
        s.fail(
            f"fields {unknown} are not in {right}", f"choose from {[f.name for f in rds.fields]}"
        )
    clash = [c for c in bring if c in s.types]
    if clash:
        s.fail(
            f"joined fields {clash} already exist in the stream",
            "rename or drop them before the join",
        )
    out = list(s.src)
    for c in bring:
        t = rtypes[c]
        out.append(spec.FieldSpec(c, optional(t) if node.how == "left" else t))
    return out


def _check_join_columns(node: spec.JoinNode, s: Stream, rtypes: dict[str, spec.DType]) -> None:
    for left_col, right_col in zip(node.left_on, node.right_on, strict=True):
        lt = s.types[left_col]
        if isinstance(lt, spec.OptionalType):
            s.report(
                f"join column {left_col!r} is Optional", f"dropnull({left_col!r}) before the join"
            )
        elif not same_type(lt, rtypes[right_col]):
            s.report(f"join column {left_col!r} is {render(lt)} but {node.right}.{right_col} is {render(rtypes[right_col])}",
                     f"cast it with assign({left_col}=col({left_col!r}).astype(...))")  # fmt: skip


# --------------------------------------------------------------------------- keyed


def _infer_aggregate(node: spec.AggregateNode, s: Stream) -> Schema:
    gkeys, aggs = node.keys, node.aggs
    s.need(gkeys, "groupby key(s)")
    kinds = {a.window.kind in ("continuous", "forever") for a in aggs}
    if len(kinds) > 1:
        s.report("mixes continuous and tumbling/hopping/session windows",
                 "split the aggregate into two pipelines, one per window kind")  # fmt: skip
    discrete = {a.window for a in aggs if a.window.kind not in ("continuous", "forever")}
    if node.window is None and len(discrete) > 1:  # each would close at its own times
        s.report("aggregates over different tumbling/hopping/session windows ("
                 + ", ".join(sorted(_window_text(w) for w in discrete)) + ")",
                 "give its aggregations one window, or aggregate each window in a dataset "
                 "of its own")  # fmt: skip
    for k in gkeys:
        if isinstance(s.types[k], spec.OptionalType):
            s.report(f"groupby key {k!r} is Optional", f"dropnull({k!r}) before groupby")
    out = [spec.FieldSpec(k, s.types[k], key=True) for k in gkeys]
    if node.window is not None:
        _infer_window_key(node, node.window, s)
        out.append(spec.FieldSpec(spec.WINDOW_FIELD, spec.WINDOW_TYPE, key=True))
    for a in aggs:
        if a.kind == "exp_decay":
            out.append(spec.FieldSpec(a.into, _exp_decay_type(a, s)))
            continue
        out.append(spec.FieldSpec(a.into, agg_type(a, s.types)))
        if a.window.kind == "session" and not a.window.gap:
            s.report(
                f"'{a.into}' uses a Session window without a gap",
                "give Session('30m')-style gap",
            )
    if node.along is not None:
        s.need((node.along,), "along= column")
        if not isinstance(base(s.types[node.along]), spec.TimestampType):
            s.report(f"along={node.along!r} is not a (non-Optional) datetime field",
                     "aggregate along a datetime field of the input, or dropnull it first")  # fmt: skip
    # the output's time keeps the input's name; with along= it holds the along times
    out.append(spec.FieldSpec(s.ts, spec.TimestampType(), timestamp=True))
    return out


def _window_text(w: spec.WindowSpec) -> str:
    parts = [f"{n}={v}s" for n in ("duration", "stride", "gap") if (v := getattr(w, n))]
    if w.lookback:
        parts.append(f"lookback={w.lookback}s")
    return f"{w.kind}({', '.join(parts)})"


def _infer_window_key(node: spec.AggregateNode, w: spec.WindowSpec, s: Stream) -> None:
    """``groupby(..., window=...)``: a stream's rows fall into windows; a keyed dataset's
    rows are versions, which windows of event time do not describe."""
    if s.keys:
        s.report(f"groupby(..., window=...) over a keyed dataset (keys {s.keys})",
                 "window the stream the keyed dataset is made from, or aggregate with a "
                 "continuous window")  # fmt: skip
    if spec.WINDOW_FIELD in node.keys:
        s.report(f"groupby key {spec.WINDOW_FIELD!r} clashes with the window key of window=",
                 f"rename the column {spec.WINDOW_FIELD!r} before the groupby")  # fmt: skip
    if w.kind == "session" and not w.gap:
        s.report("groupby(..., window=Session(...)) has no gap", "give Session('30m')-style gap")
    if w.kind in ("tumbling", "hopping") and (w.duration or 0) <= 0:
        s.report("groupby(..., window=...) has a window of no length", "give a positive duration")


def _exp_decay_type(a: spec.AggSpec, s: Stream) -> spec.DType:
    """ExpDecaySum: of an int, float or decimal column (Optional too: nulls are skipped), a
    float (0.0 over no rows)."""
    assert a.of is not None
    if a.window.kind not in ("continuous", "forever"):
        s.report(f"ExpDecaySum '{a.into}' uses a {a.window.kind} window",
                 "give it a continuous window: Continuous('7d') or Continuous('forever')")  # fmt: skip
    s.need((a.of,), f"ExpDecaySum '{a.into}' column")
    of = s.types[a.of]
    if not isinstance(base(strip_optional(of)), spec.IntType | spec.FloatType | spec.DecimalType):
        s.report(f"ExpDecaySum '{a.into}' of {a.of!r} needs an int, float or decimal, got "
                 f"{render(of)}", f"aggregate a numeric column, or cast {a.of!r} with assign")  # fmt: skip
    return spec.FloatType()


def _infer_first_latest(node: spec.FirstNode | spec.LatestNode, s: Stream) -> Schema:
    s.need(node.keys, "groupby key(s)")
    return [replace(f, key=f.name in node.keys) for f in s.src]


def _infer_dedup(node: spec.DedupNode, s: Stream) -> Schema:
    s.need(node.by, "dedup column(s)")
    return s.src


# --------------------------------------------------------------------------- column sets


def _infer_drop(node: spec.DropNode, s: Stream) -> Schema:
    cols = node.columns
    s.need(cols, "dropped column(s)")
    protected = [c for c in cols if c == s.ts or c in s.keys]
    if protected:
        src = s.fennel_name(node.input)
        values = [f.name for f in s.src if f.name != s.ts and f.name not in s.keys]
        text = "" if src is None else (
            f"Field `{protected[0]}` is a key or timestamp field in schema of drop node input "
            f"{src}. Value fields are: {values}")  # fmt: skip
        s.report(f"drops the key/timestamp field(s) {protected}", "keep them; drop other fields",
                 text)  # fmt: skip
    return [f for f in s.src if f.name not in cols]


def _infer_dropnull(node: spec.DropNullNode, s: Stream) -> Schema:
    cols = node.columns
    s.need(cols, "dropnull column(s)")
    targets = set(cols) or {f.name for f in s.src if isinstance(f.dtype, spec.OptionalType)}
    return [replace(f, dtype=strip_optional(f.dtype)) if f.name in targets else f for f in s.src]


def _infer_select(node: spec.SelectNode, s: Stream) -> Schema:
    s.need(node.columns, "selected column(s)")
    keep = set(node.columns) | {s.ts} | set(s.keys)
    return [f for f in s.src if f.name in keep]


def _infer_rename(node: spec.RenameNode, s: Stream) -> Schema:
    s.need([old for old, _ in node.mapping], "renamed column(s)")
    m = dict(node.mapping)
    return [replace(f, name=m.get(f.name, f.name)) for f in s.src]


def _no_rule(node: Any, s: Stream) -> Schema:
    raise Stop


# --------------------------------------------------------------------------- dispatch

_RULES: dict[type, Rule] = {
    spec.InputNode: _infer_input,
    spec.UnionNode: _infer_union,
    spec.FilterNode: _on_stream(_infer_filter),
    spec.AssignNode: _on_stream(_infer_assign),
    spec.TransformNode: _on_stream(_infer_transform),
    spec.JoinNode: _on_stream(_infer_join),
    spec.AggregateNode: _on_stream(_infer_aggregate),
    spec.FirstNode: _on_stream(_infer_first_latest),
    spec.LatestNode: _on_stream(_infer_first_latest),
    spec.DedupNode: _on_stream(_infer_dedup),
    spec.ExplodeNode: _on_stream(_infer_explode),
    spec.DropNode: _on_stream(_infer_drop),
    spec.DropNullNode: _on_stream(_infer_dropnull),
    spec.SelectNode: _on_stream(_infer_select),
    spec.RenameNode: _on_stream(_infer_rename),
    spec.ChangelogNode: _on_stream(_infer_changelog),
}
_UNKNOWN: Rule = _on_stream(_no_rule)  # as before: an unknown operator still has its input checked


def infer_node(
    node: spec.Node,
    schemas: Mapping[str, Schema],
    datasets: Mapping[str, spec.DatasetSpec],
    err: Report,
    pipeline: spec.PipelineSpec | None = None,
) -> Schema:
    """The schema out of ``node``, given the schemas out of the nodes before it (and the
    pipeline it is in, for errors worded as Fennel's)."""
    rule = next((_RULES[c] for c in type(node).__mro__ if c in _RULES), _UNKNOWN)
    nodes = {n.id: n for n in pipeline.nodes} if pipeline is not None else {}
    name = pipeline.name if pipeline is not None else ""
    return rule(node, Ctx(node, schemas, datasets, err, nodes=nodes, pipeline=name))


# How Fennel names the schema out of an operator in its errors ("...->drop node"); an
# operator missing here (a transform, whose name depends on its schema) gets our words only.
_FENNEL_LABELS: dict[type, str] = {
    spec.FilterNode: "filter", spec.AggregateNode: "aggregate", spec.JoinNode: "join",
    spec.UnionNode: "union", spec.RenameNode: "rename", spec.AssignNode: "assign",
    spec.DropNode: "drop", spec.SelectNode: "select", spec.DropNullNode: "dropnull",
    spec.DedupNode: "drop_duplicates", spec.ExplodeNode: "explode", spec.FirstNode: "first",
    spec.LatestNode: "lastest", spec.ChangelogNode: "Changelog",
}  # fmt: skip
