"""GraphQL documents answered without graphql-core's executor: the serving shape, compiled
once per document.

Why: strawberry and graphql-core cost ~0.3 ms of CPU per request on top of the query itself
(extension hooks, variable coercion, field resolution and completion), half again a REST
query's whole cost. Most serving traffic is one document sent over and over —
``query($uid: Int64!) { userFeatures(uid: $uid) { spend7d country } }`` — so such a document
is checked once (parsed and validated with the schema's own rules and limits) and compiled
into which arguments feed which inputs and which features fill which response keys.

What compiles: one query operation, no fragments or directives, one featureset root field
whose arguments are literals or variables (no defaults), selecting Int64, Float, Boolean or
String features (aliases allowed). Anything else, and any request whose variables or answers
fall outside the scalars' plain cases, or that fails (auth, an engine down), takes strawberry's
executor, which gives the answer or the error as GraphQL says.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import graphql as gql

from fennel_dagster.errors import QueryError
from fennel_dagster.ops.rows import base_type
from fennel_dagster.serve.graphql import (
    LIMIT_RULES,
    MAX_TOKENS,
    BranchSchema,
    Context,
    RootField,
    _int64,
)
from fennel_dagster.wire import spec

_NOT_GIVEN = object()


class _Slow(QueryError):  # noqa: N818 - internal signal, never leaves this module
    """This request leaves the compiled path: strawberry's executor answers it."""


def _kind(dtype: spec.DType) -> str | None:
    """The GraphQL scalar a feature's values take, if compiled documents serve it."""
    match base_type(dtype):
        case spec.IntType():
            return "Int64"
        case spec.FloatType():
            return "Float"
        case spec.BoolType():
            return "Boolean"
        case spec.StringType():
            return "String"
    return None


def _plain(kind: str, v: Any) -> Any:
    """``v`` as graphql-core coerces it (a variable) or serializes it (an answer), for the
    plain cases: a value of the scalar's own JSON type (an int for a Float); else ``_Slow``."""
    match kind:
        case "Int64" if type(v) is int and abs(v) < 2**63:
            return v
        case "Float" if type(v) in (int, float) and math.isfinite(v):
            return float(v)
        case "Boolean" if type(v) is bool:
            return v
        case "String" if type(v) is str:
            return v
    raise _Slow


@dataclass(frozen=True)
class Compiled:
    """A document's answer recipe: the root field, its arguments (feature, scalar, literal
    value or variable name) and its selections (response key, feature name, scalar)."""

    root: RootField
    key: str
    args: tuple[tuple[str, str, Any, str | None], ...]
    selections: tuple[tuple[str, str, str], ...]
    variables: dict[str, bool]  # name -> non-null

    async def run(self, ctx: Context, variables: dict[str, Any] | None) -> dict[str, Any] | None:
        """The response's ``data``, or None: strawberry's executor must answer."""
        try:
            inputs = {}
            for feature, kind, literal, var in self.args:
                v = literal if var is None else (variables or {}).get(var, _NOT_GIVEN)
                if v is _NOT_GIVEN or v is None:
                    if var is not None and self.variables[var]:
                        raise _Slow  # a non-null variable missing: GraphQL's error
                    continue
                inputs[feature] = _plain(kind, v)
            wanted = list(dict.fromkeys(name for _, name, _ in self.selections))
            values = await self.root.values(ctx, inputs, wanted)
            row: dict[str, Any] = {}
            for key, name, kind in self.selections:
                if key not in row:
                    got = values.get(name)
                    row[key] = None if got is None else _plain(kind, got)
        except Exception:  # noqa: BLE001 - any failure: the executor answers, errors and all
            return None
        return {self.key: row}


def compile_document(
    schema: gql.GraphQLSchema,
    roots: dict[str, RootField],
    document: str,
    operation: str | None,
) -> Compiled | None:
    """``document``'s recipe, or None if it is not of the compiled shape or not valid."""
    try:
        doc = gql.parse(document, max_tokens=MAX_TOKENS, no_location=True)
    except gql.GraphQLError:
        return None
    if gql.validate(schema, doc, (*gql.specified_rules, *LIMIT_RULES)):
        return None
    ops = [d for d in doc.definitions if isinstance(d, gql.OperationDefinitionNode)]
    if len(ops) != 1 or len(doc.definitions) != 1:
        return None
    op = ops[0]
    named = op.name.value if op.name else None
    if op.operation != gql.OperationType.QUERY or op.directives or operation not in (None, named):
        return None
    variables = {}
    for d in op.variable_definitions:
        non_null = isinstance(d.type, gql.NonNullTypeNode)
        if d.default_value is not None or d.directives:
            return None
        variables[d.variable.name.value] = non_null
    if len(op.selection_set.selections) != 1:
        return None
    field = op.selection_set.selections[0]
    if not isinstance(field, gql.FieldNode) or field.directives or field.selection_set is None:
        return None
    root = roots.get(field.name.value)
    if root is None:
        return None
    args: list[tuple[str, str, Any, str | None]] = []
    for a in field.arguments:
        feature = root.args[a.name.value]
        kind = _kind(root.types[feature])
        if kind is None:
            return None
        if isinstance(a.value, gql.VariableNode):
            args.append((feature, kind, None, a.value.name.value))
            continue
        literal = _literal(kind, a.value)
        if literal is _NOT_GIVEN:
            return None
        args.append((feature, kind, literal, None))
    selections = []
    for sel in field.selection_set.selections:
        if (
            not isinstance(sel, gql.FieldNode)
            or sel.directives
            or sel.name.value not in root.fields
        ):
            return None  # fragments, __typename, directives
        name = root.fields[sel.name.value]
        kind = _kind(root.types[f"{root.featureset}.{name}"])
        if kind is None:
            return None
        selections.append(((sel.alias or sel.name).value, name, kind))
    key = (field.alias or field.name).value
    return Compiled(root, key, tuple(args), tuple(selections), variables)


def _literal(kind: str, node: gql.ValueNode) -> Any:
    """A literal argument as the executor reads it, or ``_NOT_GIVEN`` if not a plain one."""
    try:
        match node:
            case gql.NullValueNode():
                return None
            case gql.IntValueNode() if kind == "Int64":
                return _int64(int(node.value))
            case gql.IntValueNode() | gql.FloatValueNode() if kind == "Float":
                return float(node.value)
            case gql.StringValueNode() if kind == "String":
                return node.value
            case gql.BooleanValueNode() if kind == "Boolean":
                return node.value
    except ValueError:
        pass
    return _NOT_GIVEN


class CompiledDocuments:
    """Recipes by (branch, commit, document, operation name), least recently used dropped
    first; a document that does not compile is remembered as None, so it is checked once."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._cache: OrderedDict[tuple[str, int | None, str, str | None], Compiled | None] = (
            OrderedDict()
        )

    def of(
        self, branch: str, head: int | None, served: BranchSchema, document: str, op: str | None
    ) -> Compiled | None:
        key = (branch, head, document, op)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        core = served.schema._schema  # noqa: SLF001 - graphql-core's schema, to validate with
        found = compile_document(core, served.roots, document, op)
        self._cache[key] = found
        if len(self._cache) > self.size:
            self._cache.popitem(last=False)
        return found
