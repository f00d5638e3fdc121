"""From known input features to wanted output features: which extractors, in which order."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fennel_dagster.errors import QueryError
from fennel_dagster.wire import spec


class QueryPlanError(QueryError, ValueError):
    """A query that no sequence of extractors can answer."""


@dataclass(frozen=True)
class QueryPlan:
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    steps: tuple[spec.ExtractorSpec, ...]  # in execution order


def _producers(featuresets: Iterable[spec.FeaturesetSpec]) -> dict[str, spec.ExtractorSpec]:
    out: dict[str, spec.ExtractorSpec] = {}
    for fs in featuresets:
        for ex in fs.extractors:
            for o in ex.outputs:
                out[f"{fs.name}.{o}"] = ex
    return out


def _expand(names: Sequence[str], featuresets: Sequence[spec.FeaturesetSpec]) -> list[str]:
    """``"User"`` means every feature of featureset User."""
    by_name = {fs.name: fs for fs in featuresets}
    out: list[str] = []
    for n in names:
        if "." not in n and n in by_name:
            out.extend(f"{n}.{f.name}" for f in by_name[n].features)
        else:
            out.append(n)
    return out


def plan_query(
    featuresets: Sequence[spec.FeaturesetSpec], inputs: Sequence[str], outputs: Sequence[str]
) -> QueryPlan:
    known = set(_expand(inputs, featuresets))
    wanted = _expand(outputs, featuresets)
    producers = _producers(featuresets)
    declared = {f"{fs.name}.{f.name}" for fs in featuresets for f in fs.features}
    steps: list[spec.ExtractorSpec] = []
    planned: set[tuple[str, str]] = set()
    visiting: list[str] = []

    def need(feature: str) -> None:
        if feature in known:
            return
        if feature not in declared:
            raise QueryPlanError(f"unknown feature {feature}: no committed featureset declares it")
        ex = producers.get(feature)
        if ex is None:
            raise QueryPlanError(
                f"{feature} is neither an input of the query nor computed by an extractor: pass it "
                f"in inputs, or add an extractor with @outputs({feature.split('.', 1)[1]!r})"
            )
        if feature in visiting:
            raise QueryPlanError(
                f"extractors form a cycle through {' -> '.join([*visiting, feature])}"
            )
        visiting.append(feature)
        for dep in ex.inputs:
            need(dep)
        visiting.pop()
        ident = (ex.featureset, ex.name)
        if ident not in planned:
            planned.add(ident)
            steps.append(ex)
        known.update(f"{ex.featureset}.{o}" for o in ex.outputs)

    for w in wanted:
        need(w)
    return QueryPlan(tuple(_expand(inputs, featuresets)), tuple(wanted), tuple(steps))
