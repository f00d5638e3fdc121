"""The operator language of ``@pipeline`` bodies: each call appends one IR node.

A pipeline function runs once, at declaration time, on ``Node`` proxies; what it returns
is the terminal node of a DAG whose nodes are numbered "n0", "n1", ... in creation order
(so the same function always yields the same IR). Schemas are not tracked here: the
definition server infers them from the IR and reports mismatches with every detail.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fennel_dagster.declare import semantics
from fennel_dagster.declare.aggregate import Aggregation
from fennel_dagster.declare.dtypes import python_type, to_dtype
from fennel_dagster.declare.errors import DeclarationError
from fennel_dagster.declare.expr import Expr, col
from fennel_dagster.declare.window import Hopping, Session, Tumbling, Window, duration
from fennel_dagster.wire import spec
from fennel_dagster.wire.usercode import capture


class PipelineBuilder:
    def __init__(self, where: str) -> None:
        self.where = where
        self.nodes: list[spec.Node] = []
        self.inputs: dict[str, spec.DatasetSpec] = {}  # the @inputs datasets, for schema()

    def next_id(self) -> str:
        return f"n{len(self.nodes)}"

    def add(self, node: spec.Node) -> Node:
        self.nodes.append(node)
        return Node(self, node.id)


def _names(cols: tuple[Any, ...] | list[Any], where: str) -> tuple[str, ...]:
    out: list[str] = []
    for c in cols:
        if isinstance(c, list | tuple):
            out.extend(_names(c, where))
        else:
            out.append(str(c))
    return tuple(out)


class Node:
    """A stream inside a pipeline body: ``txn.filter(...).groupby("uid").aggregate(...)``."""

    def __init__(self, builder: PipelineBuilder, node_id: str) -> None:
        self._b, self.id = builder, node_id

    def _where(self, op: str) -> str:
        return f"{self._b.where} ({op})"

    def schema(self) -> dict[str, Any]:
        """Fennel's ``Node.schema()``: this stream's fields and their types, e.g. to build
        a transform's output schema from its input's."""
        try:
            dtypes = semantics.installed().node_schema(self._b.nodes, self.id, self._b.inputs)
        except ValueError as e:
            raise DeclarationError(f"{self._where('schema')}: {e}") from e
        return {name: python_type(t) for name, t in dtypes.items()}

    def filter(self, predicate: Expr | Callable[..., Any]) -> Node:
        if isinstance(predicate, Expr):
            node = spec.FilterNode(self._b.next_id(), self.id, predicate=predicate.to_ir())
        elif callable(predicate):
            node = spec.FilterNode(self._b.next_id(), self.id, code=capture(predicate))
        else:
            raise DeclarationError(f"{self._where('filter')}: pass an expression or a function")
        return self._b.add(node)

    def assign(self, *args: Any, **exprs: Expr) -> Node:
        columns: list[spec.AssignColumn] = []
        if args:
            if len(args) != 3 or exprs:
                raise DeclarationError(
                    f"{self._where('assign')}: use assign(name, type, function) or "
                    "assign(name=expression.astype(type), ...)"
                )
            name, tp, fn = args
            dtype = to_dtype(tp, f"{self._b.where}.assign({name!r})")
            columns.append(spec.AssignColumn(str(name), dtype, code=capture(fn)))
        for name, e in sorted(exprs.items()):
            ir = e.to_ir() if isinstance(e, Expr) else None
            if not (isinstance(ir, spec.Call) and ir.fn == "astype" and ir.dtype is not None):
                raise DeclarationError(
                    f"{self._where('assign')}: the expression for '{name}' must end with "
                    f".astype(<type>) so the column's type is declared, e.g. "
                    f"assign({name}=(col('a') * 2).astype(float))"
                )
            columns.append(spec.AssignColumn(name, ir.dtype, expr=ir))
        if not columns:
            raise DeclarationError(f"{self._where('assign')}: nothing to assign")
        return self._b.add(spec.AssignNode(self._b.next_id(), self.id, tuple(columns)))

    def transform(self, fn: Callable[..., Any], schema: dict[str, Any] | None = None) -> Node:
        """``fn(df) -> df`` on each batch; ``schema=`` its output's fields, or none: the same
        fields as its input (as in Fennel), each checked as declared."""
        if schema is None:
            try:
                same = semantics.installed().node_schema(self._b.nodes, self.id, self._b.inputs)
            except ValueError as e:
                raise DeclarationError(
                    f"{self._where('transform')}: {e}; or pass schema={{field: type, ...}}"
                ) from e
            fields = tuple(spec.FieldSpec(n, t) for n, t in same.items())
        else:
            fields = tuple(
                spec.FieldSpec(n, to_dtype(t, f"{self._b.where}.transform schema '{n}'"))
                for n, t in schema.items()
            )
        return self._b.add(spec.TransformNode(self._b.next_id(), self.id, capture(fn), fields))

    def join(
        self,
        other: Any,
        how: str = "left",
        on: list[str] | None = None,
        left_on: list[str] | None = None,
        right_on: list[str] | None = None,
        within: tuple[str, str] = ("forever", "0s"),
        fields: list[str] | None = None,
    ) -> Node:
        right = getattr(other, "__fennel_dataset_name__", None)
        if isinstance(other, Node):
            src = next(n for n in self._b.nodes if n.id == other.id)
            right = src.dataset if isinstance(src, spec.InputNode) else None
        if right is None:
            raise DeclarationError(
                f"{self._where('join')}: the right side of a join must be a keyed input dataset of this pipeline, as it was passed in (not a derived stream)"
            )
        if how not in ("left", "inner"):
            raise DeclarationError(f"{self._where('join')}: how={how!r}; use 'left' or 'inner'")
        if on is not None and (left_on or right_on):
            raise DeclarationError(
                f"{self._where('join')}: give on= or left_on=/right_on=, not both"
            )
        lo, ro = (on, on) if on is not None else (left_on, right_on)
        if not lo or not ro or len(lo) != len(ro):
            raise DeclarationError(
                f"{self._where('join')}: name the join columns with on=[...] or with "
                "left_on=[...] and right_on=[...] of equal length"
            )
        if not isinstance(within, tuple | list) or len(within) != 2:
            raise DeclarationError(
                f"{self._where('join')}: within={within!r}; give two durations (before, after), "
                "e.g. within=('forever', '0s')"
            )
        before, after = within
        if str(after).lower() == "forever":
            raise DeclarationError(
                f"{self._where('join')}: within={tuple(within)!r}: the upper bound (after) "
                "cannot be 'forever'; give a duration such as '1h'"
            )
        before_s = None if str(before).lower() == "forever" else duration(before, "join within")
        node = spec.JoinNode(
            id=self._b.next_id(), input=self.id, right=right, how=how,  # type: ignore[arg-type]
            left_on=_names(lo, ""), right_on=_names(ro, ""),
            within_before=before_s, within_after=duration(after, "join within"),
            fields=tuple(fields or ()),
        )  # fmt: skip
        return self._b.add(node)

    def groupby(self, *keys: Any, window: Window | None = None) -> GroupBy:
        names = _names(keys, "")
        if not names:
            raise DeclarationError(f"{self._where('groupby')}: name at least one key field")
        if window is not None and not isinstance(window, Tumbling | Hopping | Session):
            raise DeclarationError(
                f"{self._where('groupby')}: window= keys rows by a Tumbling, Hopping or "
                f"Session window, not {type(window).__name__}; give a continuous window to "
                "each aggregation instead"
            )
        if isinstance(window, Hopping) and window.forever:
            raise DeclarationError(
                f"{self._where('groupby')}: window=Hopping('forever', ...) as a key would begin "
                "at no time; give the aggregations window=Hopping('forever', stride) instead"
            )
        return GroupBy(self, names, window)

    def dedup(self, by: list[str] | str | None = None, window: Window | None = None) -> Node:
        if window is not None and not isinstance(window, Tumbling | Session):
            raise DeclarationError(f"{self._where('dedup')}: window must be Tumbling or Session")
        cols = (by,) if isinstance(by, str) else tuple(by or ())
        ir_window = window.to_ir() if window is not None else None
        return self._b.add(spec.DedupNode(self._b.next_id(), self.id, cols, ir_window))

    def explode(self, *names: Any, columns: Any = None) -> Node:
        """``explode("a", "b")`` or Fennel's ``explode(columns=["a", "b"])``."""
        if columns is not None:
            names = (*names, *([columns] if isinstance(columns, str) else columns))
        return self._b.add(spec.ExplodeNode(self._b.next_id(), self.id, _names(names, "")))

    def drop(self, *names: Any, columns: Any = None) -> Node:
        """``drop("a", "b")`` or Fennel's ``drop(columns=["a", "b"])``."""
        if columns is not None:
            names = (*names, *([columns] if isinstance(columns, str) else columns))
        return self._b.add(spec.DropNode(self._b.next_id(), self.id, _names(names, "")))

    def dropnull(self, *columns: Any) -> Node:
        return self._b.add(spec.DropNullNode(self._b.next_id(), self.id, _names(columns, "")))

    def select(self, *columns: Any) -> Node:
        return self._b.add(spec.SelectNode(self._b.next_id(), self.id, _names(columns, "")))

    def rename(
        self, mapping: dict[str, str] | None = None, columns: dict[str, str] | None = None
    ) -> Node:
        """``rename({"a": "b"})`` or Fennel's ``rename(columns={"a": "b"})``."""
        given = {**(mapping or {}), **(columns or {})}
        pairs = tuple(sorted((str(k), str(v)) for k, v in given.items()))
        return self._b.add(spec.RenameNode(self._b.next_id(), self.id, pairs))

    def changelog(
        self,
        delete_column: str | None = None,
        *,
        delete: str | None = None,
        insert: str | None = None,
    ) -> Node:
        """Upserts as an append stream with a flag column: ``changelog("deleted")`` or Fennel's
        ``changelog(delete="deleted")`` (True on a retraction), or ``changelog(insert="ins")``
        (True on an insert: the same stream with the flag negated)."""
        given = [c for c in (delete_column, delete, insert) if c is not None]
        if len(given) != 1:
            raise DeclarationError(
                f"{self._where('changelog')}: name the flag column once: "
                "changelog(delete='deleted') or changelog(insert='inserted')"
            )
        flag = given[0]
        out = self._b.add(spec.ChangelogNode(self._b.next_id(), self.id, flag))
        if insert is None:
            return out
        return out.assign(**{flag: (~col(flag)).astype(bool)})

    def union(self, *others: Node) -> Node:
        return self._b.add(spec.UnionNode(self._b.next_id(), (self.id, *(o.id for o in others))))

    def __add__(self, other: Node) -> Node:
        return self.union(other)


class GroupBy:
    def __init__(self, node: Node, keys: tuple[str, ...], window: Window | None) -> None:
        self._node, self._keys, self._window = node, keys, window

    def aggregate(
        self,
        *aggs: Aggregation | list[Aggregation],
        emit: str = "eager",
        along: str | None = None,
        **named: Aggregation,
    ) -> Node:
        b = self._node._b
        where = f"{b.where} (aggregate)"
        items: list[tuple[str, Aggregation]] = []
        # Fennel takes them unpacked or as one list: aggregate(a, b) or aggregate([a, b])
        flat = [a for x in aggs for a in (x if isinstance(x, list | tuple) else [x])]
        for agg in flat:
            if not agg.into_field:
                raise DeclarationError(
                    f"{where}: {type(agg).__name__}(...) passed positionally needs into_field=; "
                    "or pass it by name: aggregate(total=Sum(of='amount', window=...))"
                )
            items.append((agg.into_field, agg))
        items.extend(sorted(named.items()))
        window = self._window.to_ir() if self._window is not None else None
        if not items and window is None:
            raise DeclarationError(
                f"{where}: give at least one aggregation (only groupby(..., window=...) may "
                "aggregate nothing: its rows are the windows themselves)"
            )
        if emit not in ("eager", "final"):
            raise DeclarationError(f"{where}: emit={emit!r}; use 'eager' or 'final'")
        specs = []
        for into, agg in items:
            if agg.window is None and self._window is not None:
                agg.window = self._window
            out = agg.to_ir(into, where)
            if window is not None and out.window != window:
                raise DeclarationError(  # Fennel's wording first
                    f"Window in spec : `{into}` not be different from default window set in "
                    f"groupby: {where}: leave {type(agg).__name__}(window=...) out, the "
                    "groupby's window applies to every aggregation"
                )
            specs.append(out)
        specs = _decimal_scales(specs, self._node)
        node = spec.AggregateNode(
            b.next_id(),
            self._node.id,
            self._keys,
            tuple(specs),
            "eager" if emit == "eager" else "final",
            along,  # type: ignore[arg-type]
            window=window,
        )
        return b.add(node)

    def first(self) -> Node:
        b = self._node._b
        self._no_window("first")
        return b.add(spec.FirstNode(b.next_id(), self._node.id, self._keys))

    def latest(self) -> Node:
        b = self._node._b
        self._no_window("latest")
        return b.add(spec.LatestNode(b.next_id(), self._node.id, self._keys))

    def _no_window(self, op: str) -> None:
        if self._window is not None:
            raise DeclarationError(
                f"{self._node._b.where} ({op}): groupby(..., window=...) takes only "
                f"aggregate(); drop window= to take the {op} row of each key"
            )


def _decimal_scales(aggs: list[spec.AggSpec], source: Node) -> list[spec.AggSpec]:
    """Each Average of a Decimal[scale] column told its scale (``AggSpec.decimal_scale``):
    its mean is the decimal mean. The input's schema is what the commit infers; a schema the
    commit will refuse leaves the aggregations as they are (the commit reports it)."""
    if not any(a.kind == "avg" and a.of for a in aggs):
        return aggs
    try:
        types = semantics.installed().node_schema(source._b.nodes, source.id, source._b.inputs)
    except (ValueError, KeyError, RuntimeError):
        return aggs
    out = []
    for a in aggs:
        dtype = types.get(a.of) if a.kind == "avg" and a.of else None
        while isinstance(dtype, spec.OptionalType):
            dtype = dtype.of
        if isinstance(dtype, spec.DecimalType):
            a = replace(a, decimal_scale=dtype.scale)
        out.append(a)
    return out
