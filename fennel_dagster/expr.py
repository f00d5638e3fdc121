"""Expressions: ``from fennel_dagster.expr import col, lit, when`` (Fennel's ``fennel.expr``);
``Expr.typeof``/``eval`` answer as the commit's type checker and the pipelines' evaluator."""

from fennel_dagster.declare.expr import (
    Expr,
    InvalidExprException,
    col,
    datetime,
    from_epoch,
    lit,
    make_struct,
    now,
    repeat,
    var,
    when,
)

__all__ = [
    "Expr",
    "InvalidExprException",
    "col",
    "datetime",
    "from_epoch",
    "lit",
    "make_struct",
    "now",
    "repeat",
    "var",
    "when",
]
