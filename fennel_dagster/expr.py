"""Expressions: ``from fennel_dagster.expr import col, lit, when``."""

from fennel_dagster.declare.expr import Expr, col, lit, when

__all__ = ["Expr", "col", "lit", "when"]
