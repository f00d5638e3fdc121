"""The definition server: a serialised commit in, the validated graph and blueprints out."""

from __future__ import annotations

from dataclasses import dataclass, replace

from fennel_dagster.commit.blueprint import BlueprintSet
from fennel_dagster.commit.compiler import DEFAULT_PARTITIONS, compile_blueprints
from fennel_dagster.commit.environment import select_env
from fennel_dagster.commit.errors import CommitRejected, Violation
from fennel_dagster.commit.executable import PLATFORM_RULES
from fennel_dagster.commit.graph import EntityGraph
from fennel_dagster.commit.validate import validate
from fennel_dagster.wire import decode, spec


@dataclass(frozen=True)
class DefinitionResult:
    commit: spec.CommitSpec  # for an incremental commit: merged with the branch's previous one
    graph: EntityGraph
    blueprints: BlueprintSet
    errors: tuple[Violation, ...]

    def raise_for_errors(self) -> None:
        if self.errors:
            raise CommitRejected(self.errors)


class DefinitionServer:
    def __init__(self, namespace: str = "fd", partitions: int = DEFAULT_PARTITIONS) -> None:
        self.partitions = partitions
        self.namespace = namespace

    def process(self, commit_bytes: bytes, previous: spec.CommitSpec | None) -> DefinitionResult:
        commit = decode(commit_bytes)
        if not isinstance(commit, spec.CommitSpec):
            raise ValueError(f"expected a CommitSpec, got {type(commit).__name__}")
        return self.process_spec(commit, previous)

    def process_spec(
        self, commit: spec.CommitSpec, previous: spec.CommitSpec | None
    ) -> DefinitionResult:
        commit = select_env(commit)
        errors = tuple(validate(commit, previous, PLATFORM_RULES))
        merged = merge_incremental(commit, previous) if commit.incremental else commit
        graph = EntityGraph.build(merged)
        blueprints = (
            compile_blueprints(graph, self.namespace, self.partitions)
            if not errors
            else BlueprintSet(())
        )
        return DefinitionResult(merged, graph, blueprints, errors)


def merge_incremental(commit: spec.CommitSpec, previous: spec.CommitSpec | None) -> spec.CommitSpec:
    """The branch's graph after an incremental ``commit`` on ``previous``."""
    if previous is None:
        return replace(commit, incremental=False)
    ds = {d.name: d for d in previous.datasets} | {d.name: d for d in commit.datasets}
    fs = {f.name: f for f in previous.featuresets} | {f.name: f for f in commit.featuresets}
    return replace(
        commit,
        datasets=tuple(ds[n] for n in sorted(ds)),
        featuresets=tuple(fs[n] for n in sorted(fs)),
        incremental=False,
    )
