"""Expressions: ``from fennel_dagster.expr import col, lit, when`` (Fennel's ``fennel.expr``).

Also where ``Expr.typeof`` and ``Expr.eval`` get their meaning: the commit-time type checker
(``commit.infer_types``) and the pandas evaluator every executor shares (``ops.expr``), so a
type or value seen here is the one a pipeline gets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from fennel_dagster.commit.infer_types import type_of
from fennel_dagster.declare.dtypes import python_type, to_dtype
from fennel_dagster.declare.expr import (
    Expr,
    InvalidExprException,
    col,
    install_semantics,
    lit,
    when,
)
from fennel_dagster.ops.expr import astype, evaluate
from fennel_dagster.wire import spec


def _schema(schema: Mapping[str, Any]) -> dict[str, spec.DType]:
    return {name: to_dtype(tp, f"schema[{name!r}]") for name, tp in schema.items()}


class _Semantics:
    def typeof(self, e: Expr, schema: Mapping[str, Any]) -> Any:
        return python_type(type_of(e.to_ir(), _schema(schema)))

    def eval(self, e: Expr, df: pd.DataFrame, schema: Mapping[str, Any]) -> pd.Series:
        dtype = type_of(e.to_ir(), _schema(schema))
        out = evaluate(e.to_ir(), df.reset_index(drop=True))
        if not isinstance(out, pd.Series):  # a literal: one value per row
            out = pd.Series([out] * len(df))
        return astype(out, dtype)


install_semantics(_Semantics())

__all__ = ["Expr", "InvalidExprException", "col", "lit", "when"]
