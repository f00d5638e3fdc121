"""Plans of aliases and lookups keyed by the query's own inputs, run on JSON values.

Most online queries have this shape: each output is an input, or a field of a dataset
looked up by inputs. For a few rows, building pandas frames costs more than the lookups:
0.8 of the query server's 1.8 ms of CPU per one-row query on the bench machine. So the
server runs such plans on the JSON values it received and the engines sent back.

The rules are ``QueryExecutor``'s: a found row's field, else the extractor's or the
feature's default, cast to the feature's type. They apply here only to types whose JSON
values that cast maps one to one (int, float, bool, str). Any other plan, and any value
outside those types (``Unfit``), takes the executor. ``tests/query/test_gather.py`` proves
both give the same JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fennel_dagster.errors import QueryError
from fennel_dagster.ops.rows import base_type
from fennel_dagster.query.execute import LookupKey, all_prefetched, prefetches
from fennel_dagster.query.plan import QueryPlan
from fennel_dagster.wire import spec

Caster = Callable[[Any], Any]
Records = tuple[list[dict[str, Any]], list[bool]]  # an engine lookup's rows and found flags


class Unfit(QueryError, TypeError):
    """A value outside the JSON rules (never seen from the engines' typed state): the
    caller runs the plan on the executor instead."""


def _exactly(kind: type) -> Caster:
    """Values already of ``kind`` (or null) pass; anything else is ``Unfit``."""

    def cast(v: Any) -> Any:
        if v is None or type(v) is kind:
            return v
        raise Unfit(f"not a {kind.__name__}: {v!r}")

    return cast


_as_float = _exactly(float)


def _float(v: Any) -> Any:
    return float(v) if type(v) is int else _as_float(v)


_CASTERS: dict[type, Caster] = {
    spec.IntType: _exactly(int), spec.FloatType: _float, spec.BoolType: _exactly(bool),
    spec.StringType: _exactly(str),
}  # fmt: skip


def caster(dtype: spec.DType) -> Caster | None:
    """The cast of JSON values to ``dtype`` (Optional and restrictions aside), if it is one
    of the types these rules cover."""
    return _CASTERS.get(type(base_type(dtype)))


def _widens(field: spec.DType, feature: spec.DType) -> bool:
    """A field's values keep their meaning as the feature's: the same type, or int to
    float (the executor's ``astype`` for anything else may refuse or re-format a value)."""
    a, b = type(base_type(field)), type(base_type(feature))
    return a is b or (a is spec.IntType and b is spec.FloatType)


@dataclass(frozen=True)
class _Alias:
    output: str
    source: str


@dataclass(frozen=True)
class _Lookup:
    output: str
    key: LookupKey
    field: str
    as_field: Caster  # the dataset field's values, as the engine's JSON holds them
    as_feature: Caster
    default: Any  # already cast to the feature's type; None: no default


@dataclass(frozen=True)
class GatherPlan:
    inputs: Mapping[str, Caster]  # each input feature's cast
    lookups: Mapping[LookupKey, list[str]]  # each dataset asked once, with all its fields
    key_names: Mapping[LookupKey, tuple[str, ...]]  # the dataset's key fields
    steps: tuple[_Alias | _Lookup, ...]
    outputs: tuple[str, ...]

    def key_records(self, key: LookupKey, columns: Mapping[str, list[Any]]) -> list[dict[str, Any]]:
        """The keys of a lookup as JSON records of the dataset's key fields."""
        names = self.key_names[key]
        values = [columns[i] for i in key[1]]
        return [dict(zip(names, row, strict=True)) for row in zip(*values, strict=True)]

    def run(
        self, columns: Mapping[str, list[Any]], fetched: Mapping[LookupKey, Records]
    ) -> dict[str, list[Any]]:
        """The outputs' JSON columns from the inputs' (``columns``) and the engines'
        answers to ``lookups``."""
        made = dict(columns)
        for step in self.steps:
            if isinstance(step, _Alias):
                made[step.output] = made[step.source]
                continue
            rows, found = fetched[step.key]
            as_field, as_feature, default = step.as_field, step.as_feature, step.default
            out = []
            for row, hit in zip(rows, found, strict=True):
                v = as_field(row.get(step.field)) if hit else None
                out.append(default if v is None else as_feature(v))
            made[step.output] = out
        return {o: made[o] for o in self.outputs}


def gather_plan(
    plan: QueryPlan,
    featuresets: Mapping[str, spec.FeaturesetSpec],
    datasets: Mapping[str, spec.DatasetSpec],
) -> GatherPlan | None:
    """``plan`` on JSON values, or None when a step or a type is outside these rules."""
    features = {f"{fs.name}.{f.name}": f for fs in featuresets.values() for f in fs.features}
    if not all_prefetched(plan, plan.inputs):
        return None
    inputs: dict[str, Caster] = {}
    for name in plan.inputs:
        cast = caster(features[name].dtype) if name in features else None
        if cast is None:
            return None
        inputs[name] = cast
    steps: list[_Alias | _Lookup] = []
    key_names: dict[LookupKey, tuple[str, ...]] = {}
    for ex in plan.steps:
        outputs = [f"{ex.featureset}.{o}" for o in ex.outputs]
        if ex.kind == "alias":
            if ex.default is not None:
                return None  # its default fills in where missing: the executor's road
            steps.append(_Alias(outputs[0], ex.inputs[0]))
            continue
        dataset = ex.lookup_dataset
        if ex.kind != "lookup" or dataset is None or dataset not in datasets:
            return None
        ds = datasets[dataset]
        fields = {f.name: f for f in ds.fields}
        feat = features[outputs[0]]
        field = fields.get(str(ex.lookup_field))
        as_field = caster(field.dtype) if field is not None else None
        as_feature = caster(feat.dtype)
        if field is None or as_field is None or as_feature is None:
            return None
        if not _widens(field.dtype, feat.dtype):
            return None
        default = ex.default if ex.default is not None else feat.default
        try:
            default = as_feature(default)
        except Unfit:
            return None
        key = (ds.name, ex.inputs)
        key_names[key] = tuple(ds.keys)
        steps.append(_Lookup(outputs[0], key, field.name, as_field, as_feature, default))
    return GatherPlan(inputs, prefetches(plan, plan.inputs), key_names, tuple(steps), plan.outputs)
