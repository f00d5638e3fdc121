"""Schema inference through every operator, and expression typing.

``infer_pipeline`` walks a pipeline's DAG and returns the schema of its output (fields with
key and timestamp flags) or the list of problems found on the way, each pinned to its node.
The rule of each operator is in ``infer_nodes``; expression typing is in ``infer_types``
(re-exported here).
"""

from __future__ import annotations

from collections.abc import Mapping

from fennel_dagster.commit.errors import Violation
from fennel_dagster.commit.infer_nodes import Schema, Stop, infer_node
from fennel_dagster.commit.infer_types import (
    TypeErrorInExpr,
    UnknownColumn,
    agg_type,
    base,
    optional,
    same_type,
    show,
    strip_optional,
    type_of,
)
from fennel_dagster.wire import spec

__all__ = [
    "Schema",
    "TypeErrorInExpr",
    "UnknownColumn",
    "agg_type",
    "base",
    "infer_pipeline",
    "node_schemas",
    "optional",
    "same_type",
    "show",
    "strip_optional",
    "type_of",
]


def infer_pipeline(
    p: spec.PipelineSpec, datasets: Mapping[str, spec.DatasetSpec]
) -> tuple[Schema | None, list[Violation]]:
    entity = f"{p.dataset}.{p.name}"
    schemas: dict[str, Schema] = {}
    errors: list[Violation] = []

    def err(node: spec.Node, message: str, fix: str, text: str = "") -> None:
        errors.append(Violation(entity, f"{_op(node)} {node.id}", message, fix, text))

    for node in p.nodes:
        try:
            schemas[node.id] = infer_node(node, schemas, datasets, err, p)
        except TypeErrorInExpr as e:
            err(node, str(e), e.fix or "fix the expression or the columns it reads")
            return None, errors
        except Stop:
            return None, errors
    return (schemas.get(p.output), errors) if not errors else (None, errors)


def node_schemas(
    p: spec.PipelineSpec, datasets: Mapping[str, spec.DatasetSpec]
) -> dict[str, Schema]:
    """The schema flowing out of every node of a valid pipeline (the engine decodes
    intermediate rows, e.g. a repartition topic's, with these)."""
    schemas: dict[str, Schema] = {}
    problems: list[str] = []

    def err(node: spec.Node, message: str, fix: str, text: str = "") -> None:
        problems.append(f"{_op(node)} {node.id}: {message}")

    for node in p.nodes:
        schemas[node.id] = infer_node(node, schemas, datasets, err)
    if problems:
        raise ValueError(f"pipeline {p.dataset}.{p.name} is not valid: {'; '.join(problems)}")
    return schemas


def _op(node: spec.Node) -> str:
    return type(node).__name__.removesuffix("Node").lower()
