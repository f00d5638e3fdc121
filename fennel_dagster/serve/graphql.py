"""The GraphQL API: a schema generated from each branch's committed featuresets.

Library: strawberry-graphql (maintained, typed, built on graphql-core, ships depth/alias/token
limiters and parser/validation caches as extensions; dagster-graphql keeps graphql-core on
3.2, which strawberry supports). Each featureset is a GraphQL type with one typed field per
feature and a root field taking the features the featureset needs as input, so
``{ userFeatures(uid: 7) { spend7d txns1h } }`` plans and runs exactly the requested
features. Generic ``query``, ``lookup`` and ``explain`` fields and a ``log`` mutation cover
the rest. Schemas are cached per (branch, commit).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any, NewType

import strawberry
from strawberry.extensions import (
    MaxAliasesLimiter,
    MaxTokensLimiter,
    ParserCache,
    QueryDepthLimiter,
    SchemaExtension,
    ValidationCache,
)
from strawberry.scalars import JSON
from strawberry.schema.config import StrawberryConfig
from strawberry.types import Info
from strawberry.types.scalar import ScalarDefinition

from fennel_dagster.heap import freeze_built
from fennel_dagster.ops.rows import base_type, json_value
from fennel_dagster.query.plan import QueryPlan
from fennel_dagster.serve import frames
from fennel_dagster.serve.auth import Principal, entities_of
from fennel_dagster.serve.frames import BadRequest, columns, frame, to_json_columns
from fennel_dagster.serve.queries import explain
from fennel_dagster.serve.server import Server
from fennel_dagster.serve.state import BranchGraph
from fennel_dagster.wire import spec

MAX_DEPTH, MAX_ALIASES, MAX_TOKENS = 8, 32, 4000

Int64 = NewType("Int64", int)
# the scalar's definition goes to the schema's config (what strawberry recommends now)
SCALARS: dict[object, ScalarDefinition] = {
    Int64: strawberry.scalar(
        name="Int64",
        serialize=int,
        parse_value=lambda v: _int64(v),
        description="A 64-bit integer (GraphQL's Int is 32-bit)",
    )
}


def _int64(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or abs(v) >= 2**63:
        raise ValueError(f"expected a 64-bit integer, got {v!r}")
    return v


# The depth and alias limits' validation rules, made once. Strawberry's limiter extensions
# make their rule anew for each request, and validation is cached by (schema, document,
# rules): with a new rule per request every request missed the cache and was validated again
# (a fifth of a GraphQL request's CPU).
LIMIT_RULES = (
    *QueryDepthLimiter(max_depth=MAX_DEPTH).validation_rules,
    *MaxAliasesLimiter(max_alias_count=MAX_ALIASES).validation_rules,
)


class _Limits(SchemaExtension):
    def on_operation(self) -> Iterator[None]:
        ctx = self.execution_context
        ctx.validation_rules = ctx.validation_rules + LIMIT_RULES
        yield


@dataclass
class Context:
    server: Server
    principal: Principal
    branch: str
    graph: BranchGraph
    touched: set[str] = field(default_factory=set)  # featuresets answered (for stats)


@strawberry.type
class PlanStep:
    extractor: str
    kind: str
    inputs: list[str]
    outputs: list[str]
    lookups: list[str]
    runs_in: str


@strawberry.type
class Explain:
    outputs: list[str]
    steps: list[PlanStep]


@strawberry.type
class LookupResult:
    data: JSON
    found: list[bool]


@strawberry.type
class LogAccepted:
    accepted: int


def _scalar(dtype: spec.DType) -> Any:
    base = base_type(dtype)
    match base:
        case spec.IntType():
            return Int64
        case spec.FloatType():
            return float
        case spec.BoolType():
            return bool
        case spec.StringType() | spec.TimestampType() | spec.DateType() | spec.DecimalType():
            return str
    return JSON


def _gql_value(v: Any, dtype: spec.DType) -> Any:
    v = json_value(v)
    if v is not None and isinstance(base_type(dtype), spec.DecimalType):
        return str(v)
    return v


def _camel(name: str) -> str:
    return name[:1].lower() + name[1:]


def root_inputs(fs: spec.FeaturesetSpec, featuresets: dict[str, spec.FeaturesetSpec]) -> list[str]:
    """The features (any featureset) no extractor computes that ``fs``'s features need."""
    producers = {f"{x.featureset}.{o}": x for f in featuresets.values()
                 for x in f.extractors for o in x.outputs}  # fmt: skip
    need: list[str] = []
    seen: set[str] = set()

    def visit(feature: str) -> None:
        if feature in seen:
            return
        seen.add(feature)
        ex = producers.get(feature)
        if ex is None:
            need.append(feature)
            return
        for i in ex.inputs:
            visit(i)

    for f in fs.features:
        visit(f"{fs.name}.{f.name}")
    return need


class SchemaBuilder:
    """One branch's GraphQL schema, from its committed featuresets."""

    def __init__(self, graph: BranchGraph) -> None:
        self.graph = graph
        self.featuresets = graph.featuresets
        self.types = {f"{fs.name}.{f.name}": f.dtype
                      for fs in self.featuresets.values() for f in fs.features}  # fmt: skip
        self.roots: dict[str, RootField] = {}  # root field name -> its featureset's field

    def build(self) -> strawberry.Schema:
        fields: dict[str, Any] = {}
        annotations: dict[str, Any] = {}
        for fs in self.featuresets.values():
            gql_type = self._featureset_type(fs)
            name = _camel(fs.name)
            annotations[name] = gql_type | None
            fields[name] = strawberry.field(
                resolver=self._resolver(fs, gql_type),
                description=fs.meta.description or f"features of {fs.name}",
            )
        annotations.update(query=JSON, lookup=LookupResult, explain=Explain)
        fields.update(query=strawberry.field(resolver=_query), lookup=strawberry.field(resolver=_lookup),
                      explain=strawberry.field(resolver=_explain))  # fmt: skip
        query = strawberry.type(type("Query", (), {"__annotations__": annotations, **fields}))
        return strawberry.Schema(
            query=query, mutation=Mutation,
            config=StrawberryConfig(auto_camel_case=True, scalar_map=SCALARS),
            extensions=self._extensions(),
        )  # fmt: skip

    @staticmethod
    def _extensions() -> list[Any]:
        """Limits on by default; parsed and validated documents cached (the hot path).
        Factories, as strawberry asks: one extension per request; the caches are shared."""
        return [_Limits, lambda: MaxTokensLimiter(max_token_count=MAX_TOKENS),
                lambda: ParserCache(maxsize=1024), lambda: ValidationCache(maxsize=1024)]  # fmt: skip

    def _featureset_type(self, fs: spec.FeaturesetSpec) -> type:
        ann = {f.name: _scalar(f.dtype) | None for f in fs.features}
        ns: dict[str, Any] = {"__annotations__": ann, **{f.name: None for f in fs.features}}
        for f in fs.features:
            if f.description:
                ns[f.name] = strawberry.field(default=None, description=f.description)
        return strawberry.type(type(fs.name, (), ns), description=fs.meta.description or None)

    def _resolver(self, fs: spec.FeaturesetSpec, gql_type: type) -> Any:
        args = {}  # python parameter name -> fully qualified feature
        arg_names = {}  # GraphQL argument name -> fully qualified feature
        params = [inspect.Parameter("info", inspect.Parameter.KEYWORD_ONLY, annotation=Info)]
        for i, feature in enumerate(root_inputs(fs, self.featuresets)):
            owner, name = feature.split(".", 1)
            # own features by name (camelCased); another featureset's as userFeatures_uid
            py, arg = (name, None) if owner == fs.name else (f"a{i}", f"{_camel(owner)}_{name}")
            args[py] = feature
            arg_names[arg or strawberry_name(py)] = feature
            scalar: Any = _scalar(self.types[feature]) | None
            ann = Annotated[scalar, strawberry.argument(name=arg)]
            params.append(inspect.Parameter(py, inspect.Parameter.KEYWORD_ONLY, default=None,
                                            annotation=ann))  # fmt: skip
        root = RootField(
            fs.name, arg_names, {strawberry_name(f.name): f.name for f in fs.features},
            {f"{fs.name}.{f.name}": self.types[f"{fs.name}.{f.name}"] for f in fs.features}
            | {f: self.types[f] for f in arg_names.values()},
        )  # fmt: skip
        self.roots[_camel(fs.name)] = root

        async def resolve(info: Info, **given: Any) -> Any:
            wanted = _selected(info, root.fields)
            inputs = {args[p]: v for p, v in given.items() if v is not None}
            values = await root.values(info.context, inputs, wanted)
            return gql_type(**{w: values.get(w) for w in wanted})

        resolve.__signature__ = inspect.Signature(params, return_annotation=gql_type | None)  # type: ignore[attr-defined]
        resolve.__annotations__ = {p.name: p.annotation for p in params} | {
            "return": gql_type | None
        }
        return resolve


@dataclass(frozen=True)
class RootField:
    """A featureset's root field: which GraphQL argument gives which input feature, which
    GraphQL field is which feature. Its resolver and compiled documents (``graphql_fast``)
    answer through ``values``."""

    featureset: str
    args: dict[str, str]  # GraphQL argument name -> fully qualified feature
    fields: dict[str, str]  # GraphQL field name -> the featureset's feature name
    types: dict[str, spec.DType]  # fully qualified feature -> dtype (fields and arguments)

    async def values(
        self, ctx: Context, inputs: dict[str, Any], wanted: list[str]
    ) -> dict[str, Any]:
        """The ``wanted`` features (names) as GraphQL values, for the given inputs (fully
        qualified feature -> value; the featureset's own inputs are answered as given)."""
        fs = self.featureset
        outputs = [f"{fs}.{w}" for w in wanted if f"{fs}.{w}" not in inputs]
        values: dict[str, Any] = {}
        if outputs:
            plan = ctx.server.runner.plan(ctx.graph, list(inputs), outputs)
            got = await _run(ctx, plan, {k: [v] for k, v in inputs.items()}, None)
            values = {c.split(".", 1)[1]: _gql_value(v[0], self.types[c]) for c, v in got.items()}
        for feature, v in inputs.items():
            if feature.startswith(f"{fs}."):
                values[feature.split(".", 1)[1]] = v
        return values


def _selected(info: Info, camel: dict[str, str]) -> list[str]:
    """The requested features (python names) of a featureset field; ``camel`` maps GraphQL
    names to them."""
    out: list[str] = []
    for selected in info.selected_fields:
        for sel in selected.selections:
            name = getattr(sel, "name", None)
            if name in camel and camel[name] not in out:
                out.append(camel[name])
    return out


_NAMES = StrawberryConfig(auto_camel_case=True).name_converter


def strawberry_name(name: str) -> str:
    return _NAMES.apply_naming_config(name)


async def _run(
    ctx: Context, plan: QueryPlan, data: dict[str, list[Any]], ts: list[str] | None
) -> dict[str, list[Any]]:
    ctx.principal.require_entities(entities_of(plan))
    ctx.touched.update(o.split(".", 1)[0] for o in plan.outputs)
    types = ctx.server.feature_types(ctx.graph)
    missing = [i for i in plan.inputs if i not in data]
    if missing:
        raise BadRequest(f"missing input(s) {', '.join(missing)}")
    state = ctx.server.state
    return await ctx.server.runner.run_json(
        ctx.graph, plan, {i: data[i] for i in plan.inputs}, ts, types, state.routes,
        state.service_secret, "inputs",
    )  # fmt: skip


async def _query(info: Info, inputs: list[str], outputs: list[str], data: JSON,
                 timestamps: list[str] | None = None) -> JSON:  # fmt: skip
    """Any features for many rows: ``data`` is {feature: [values]} or a list of rows."""
    ctx: Context = info.context
    plan = ctx.server.runner.plan(ctx.graph, inputs, outputs)
    return JSON(await _run(ctx, plan, columns(data, "data"), timestamps))


async def _lookup(info: Info, dataset: str, keys: JSON, fields: list[str] | None = None,
                  timestamps: list[str] | None = None) -> LookupResult:  # fmt: skip
    """A point-in-time lookup of a keyed dataset: ``keys`` as {field: [values]} or rows."""
    ctx: Context = info.context
    ctx.principal.require_entities([dataset])
    job = ctx.graph.serving_job(dataset)
    ds = job.spec.dataset
    types = {f.name: f.dtype for f in ds.fields}
    data = columns(keys, "keys")
    missing = [k for k in ds.keys if k not in data]
    if missing:
        raise BadRequest(
            f"keys: {dataset} is keyed by {', '.join(ds.keys)}; missing {', '.join(missing)}"
        )
    kf = frame({k: data[k] for k in ds.keys}, types, "keys")
    if fields is not None and any(f not in types for f in fields):
        raise BadRequest(f"fields: expected fields of {dataset} ({', '.join(types)})")
    state = ctx.server.state
    df, found = await ctx.server.runner.lookup(job, kf, frames.timestamps(timestamps, len(kf), "timestamps"),
                                               fields, state.routes, state.service_secret)  # fmt: skip
    return LookupResult(data=JSON(to_json_columns(df)), found=[bool(f) for f in found])


def _explain(info: Info, inputs: list[str], outputs: list[str]) -> Explain:
    """The physical plan: which extractors run, in which order, looking up what, where."""
    ctx: Context = info.context
    plan = ctx.server.runner.plan(ctx.graph, inputs, outputs)
    ctx.principal.require_entities(entities_of(plan))
    steps = [PlanStep(extractor=s.extractor, kind=s.kind, inputs=list(s.inputs), outputs=list(s.outputs),
                      lookups=list(s.lookups), runs_in=s.runs_in) for s in explain(plan)]  # fmt: skip
    return Explain(outputs=list(plan.outputs), steps=steps)


@strawberry.type
class Mutation:
    @strawberry.mutation
    async def log(self, info: Info, webhook: str, endpoint: str, rows: JSON) -> LogAccepted:
        """Rows into every dataset sourcing from ``Webhook(webhook).endpoint(endpoint)``."""
        ctx: Context = info.context
        data = columns(rows, "rows")
        records = [dict(zip(data, vals, strict=True)) for vals in zip(*data.values(), strict=True)]
        result = await asyncio.get_running_loop().run_in_executor(
            ctx.server.runner.threads, ctx.server.log_rows, ctx.branch, webhook, endpoint, records,
            lambda reached: ctx.principal.require("log", reached),
        )  # fmt: skip
        return LogAccepted(accepted=result.accepted)


@dataclass(frozen=True)
class BranchSchema:
    """A branch's schema at one commit, with its featureset root fields."""

    schema: strawberry.Schema
    roots: dict[str, RootField]


class Schemas:
    """Schemas by (branch, commit id), built on first use."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, int | None], BranchSchema] = {}

    def of(self, graph: BranchGraph) -> BranchSchema:
        key = (graph.name, graph.head)
        found = self._cache.get(key)
        if found is None:
            builder = SchemaBuilder(graph)
            found = BranchSchema(builder.build(), builder.roots)
            if len(self._cache) > 256:
                self._cache.clear()
            self._cache[key] = found
            freeze_built()
        return found


def featureset_sdl(name: str, head: int | None, commit: spec.CommitSpec) -> dict[str, str]:
    """Each featureset's GraphQL type and root field as this branch's schema has them (shown
    on its Dagster asset, so a reader knows what to ask the server)."""
    import graphql as gql

    schema = SchemaBuilder(BranchGraph(name, head, commit)).build()
    core = schema._schema  # noqa: SLF001 - graphql-core's schema, for its printer
    query_type = core.query_type
    assert query_type is not None
    out = {}
    for fs in commit.featuresets:
        gql_type = core.get_type(fs.name)
        root = query_type.fields.get(_camel(fs.name))
        if gql_type is None or root is None:
            continue
        args = ", ".join(f"{n}: {a.type}" for n, a in root.args.items())
        out[fs.name] = (
            f"{gql.print_type(gql_type)}\n\n# root field\n{_camel(fs.name)}({args}): {fs.name}"
        )
    return out
