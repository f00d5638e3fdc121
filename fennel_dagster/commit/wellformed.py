"""Structural checks of a commit's IR, run before the semantic rules.

The declaration API always produces well-formed IR; these checks are for wire bytes from
anywhere else (another client, a hand-built commit). The semantic rules assume what these
check, so a commit with structural errors is reported with those alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from fennel_dagster.commit.errors import Violation
from fennel_dagster.wire import spec

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _name(kind: str, name: str) -> Iterable[Violation]:
    if not NAME.match(name):
        yield Violation(name or f"<unnamed {kind}>", "", f"{name!r} is not a valid {kind} name",
                              "use a Python identifier (letters, digits, underscores)")  # fmt: skip


def _duplicates(kind: str, owner: str, names: list[str]) -> Iterable[Violation]:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            yield Violation(
                owner, n, f"declares {kind} {n!r} twice", f"give each {kind} a unique name"
            )
        seen.add(n)


def _node_inputs(node: spec.Node) -> tuple[str, ...]:
    if isinstance(node, spec.InputNode):
        return ()
    if isinstance(node, spec.UnionNode):
        return node.inputs
    return (node.input,)


def check_pipeline(ds: spec.DatasetSpec, p: spec.PipelineSpec) -> Iterable[Violation]:
    entity = f"{ds.name}.{p.name}"
    yield from _name("pipeline", p.name)
    if p.dataset != ds.name:
        yield Violation(
            entity,
            "dataset",
            f"says it writes {p.dataset!r}",
            f"a pipeline of {ds.name} writes {ds.name}",
        )
    seen: set[str] = set()
    for node in p.nodes:
        where = f"{type(node).__name__} {node.id}"
        if not node.id or node.id in seen:
            yield Violation(
                entity, where, "node ids must be unique and non-empty", "re-declare the pipeline"
            )
        for ref in _node_inputs(node):
            if ref not in seen:
                yield Violation(entity, where, f"reads node {ref!r}, which does not come before it",
                                      "nodes must be in topological order and reference earlier nodes")  # fmt: skip
        if isinstance(node, spec.InputNode) and node.dataset not in p.inputs:
            yield Violation(
                entity,
                where,
                f"reads {node.dataset!r}, which is not in @inputs",
                "add it to @inputs",
            )
        if isinstance(node, spec.UnionNode) and not node.inputs:
            yield Violation(entity, where, "unions nothing", "union at least one stream")
        if isinstance(node, spec.FilterNode) and (node.predicate is None) == (node.code is None):
            yield Violation(
                entity, where, "needs exactly one of an expression or a function", "pass one"
            )
        if isinstance(node, spec.AssignNode) and any(
            (c.expr is None) == (c.code is None) for c in node.columns
        ):
            yield Violation(
                entity,
                where,
                "each column needs exactly one of an expression or a function",
                "pass one",
            )
        if isinstance(node, spec.JoinNode) and len(node.left_on) != len(node.right_on):
            yield Violation(
                entity,
                where,
                "left_on and right_on differ in length",
                "pair every left column with a right one",
            )
        if isinstance(node, spec.AggregateNode) and not node.aggs and node.window is None:
            yield Violation(entity, where, "aggregates nothing", "give at least one aggregation")
        seen.add(node.id)
    if p.output not in seen:
        yield Violation(
            entity,
            "output",
            f"its output node {p.output!r} does not exist",
            "return a stream of the pipeline",
        )


def check_extractor(fs: spec.FeaturesetSpec, ex: spec.ExtractorSpec) -> Iterable[Violation]:
    entity = f"{fs.name}.{ex.name}"
    for i in ex.inputs:
        if i.count(".") != 1 or not all(i.split(".")):
            yield Violation(
                entity,
                i,
                f"input {i!r} is not a qualified feature name",
                "name inputs as Featureset.feature",
            )
    if not ex.outputs:
        yield Violation(entity, "", "has no outputs", "name the features it computes with @outputs")
    looks = ex.lookup_dataset and ex.lookup_field
    needs = {"python": ex.code, "expr": ex.expr, "lookup": looks, "list_lookup": looks,
             "alias": ex.inputs[0] if len(ex.inputs) == 1 else None}  # fmt: skip
    if not needs.get(ex.kind):
        yield Violation(
            entity,
            ex.kind,
            f"a {ex.kind} extractor lacks what it runs",
            "re-declare the feature or extractor",
        )
    if ex.featureset != fs.name:
        yield Violation(
            entity, "featureset", f"claims featureset {ex.featureset!r}", f"it belongs to {fs.name}"
        )


def well_formed(commit: spec.CommitSpec) -> list[Violation]:
    errors: list[Violation] = []
    errors += _duplicates("dataset", "commit", [d.name for d in commit.datasets])
    errors += _duplicates("featureset", "commit", [f.name for f in commit.featuresets])
    for ds in commit.datasets:
        errors += _name("dataset", ds.name)
        errors += _duplicates("field", ds.name, [f.name for f in ds.fields])
        errors += _duplicates("pipeline", ds.name, [p.name for p in ds.pipelines])
        if ds.version < 1:
            errors.append(
                Violation(
                    ds.name, "version", f"version {ds.version} is below 1", "start versions at 1"
                )
            )
        for p in ds.pipelines:
            errors += check_pipeline(ds, p)
    for fs in commit.featuresets:
        errors += _name("featureset", fs.name)
        errors += _duplicates("feature", fs.name, [f.name for f in fs.features])
        errors += _duplicates("extractor", fs.name, [e.name for e in fs.extractors])
        for ex in fs.extractors:
            errors += check_extractor(fs, ex)
    return [e if e.entity else Violation("<unnamed>", e.where, e.message, e.fix) for e in errors]
