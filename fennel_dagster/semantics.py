"""The meaning ``declare.semantics`` asks for, from the type checker (``commit.infer``) and
the evaluator every executor shares (``ops.expr``): a type or value seen while declaring is
the one a commit checks and a pipeline computes. Installed when ``fennel_dagster`` is imported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from fennel_dagster.commit.infer import TypeErrorInExpr, type_of
from fennel_dagster.commit.infer_nodes import Stop, infer_node
from fennel_dagster.commit.validate import pipeline_schema_problems
from fennel_dagster.declare import semantics
from fennel_dagster.declare.dtypes import python_type, to_dtype
from fennel_dagster.declare.expr import Expr
from fennel_dagster.ops.expr import astype, evaluate
from fennel_dagster.wire import spec


def _schema(schema: Mapping[str, Any]) -> dict[str, spec.DType]:
    return {name: to_dtype(tp, f"schema[{name!r}]") for name, tp in schema.items()}


def _null(value: Any) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _user_value(value: Any, dtype: spec.DType) -> Any:
    """An engine value (None for null, a dict for a struct) as ``Expr.eval`` answers it."""
    if not isinstance(value, list | tuple | np.ndarray | dict) and _null(value):
        return pd.NA
    match dtype:
        case spec.OptionalType(of=inner):
            return _user_value(value, inner)
        case spec.ListType(of=inner) if isinstance(value, list | tuple | np.ndarray):
            return [_user_value(v, inner) for v in value]
        case spec.StructType(fields=fields) if isinstance(value, dict):
            cls = python_type(dtype)
            items = {f.name: _user_value(value.get(f.name), f.dtype) for f in fields}
            return items if cls is dict else cls(**items)
    return value


class _Semantics:
    def typeof(self, e: Expr, schema: Mapping[str, Any]) -> Any:
        return python_type(type_of(e.to_ir(), _schema(schema)))

    def eval(self, e: Expr, df: pd.DataFrame, schema: Mapping[str, Any]) -> pd.Series:
        dtype = type_of(e.to_ir(), _schema(schema))
        out = evaluate(e.to_ir(), df.reset_index(drop=True))
        if not isinstance(out, pd.Series):  # a literal: one value per row
            out = pd.Series([out] * len(df))
        out = astype(out, dtype)
        if out.dtype != object:
            return out
        # as Fennel's (Arrow-backed) answer: nulls as pd.NA, structs as their classes
        return pd.Series([_user_value(v, dtype) for v in out], index=out.index, dtype=object)

    def pipeline_problems(
        self, ds: spec.DatasetSpec, datasets: Mapping[str, spec.DatasetSpec]
    ) -> list[tuple[str, str]]:
        return [(str(v), v.text) for v in pipeline_schema_problems(ds, {**datasets, ds.name: ds})]

    def node_schema(
        self, nodes: Sequence[spec.Node], node_id: str, datasets: Mapping[str, spec.DatasetSpec]
    ) -> dict[str, spec.DType]:
        schemas: dict[str, Any] = {}
        problems: list[str] = []
        for node in nodes:
            try:
                schemas[node.id] = infer_node(
                    node,
                    schemas,
                    datasets,
                    lambda n, m, f, text="": problems.append(f"{n.id}: {m}"),
                )
            except (TypeErrorInExpr, Stop) as e:
                problems.append(f"{node.id}: {e}")
                break
            if node.id == node_id:
                break
        if problems:
            raise ValueError("; ".join(problems))
        return {f.name: f.dtype for f in schemas[node_id]}


semantics.install(_Semantics())
