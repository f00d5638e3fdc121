"""Aggregations (Fennel's names): ``from fennel_dagster.aggregate import Count, Sum, Avg``."""

from fennel_dagster.declare.aggregate import (
    Average,
    Avg,
    Count,
    Distinct,
    ExpDecaySum,
    FirstK,
    LastK,
    Max,
    Min,
    Quantile,
    Stddev,
    Sum,
)

__all__ = ["Average", "Avg", "Count", "Distinct", "ExpDecaySum", "FirstK", "LastK", "Max", "Min",
           "Quantile", "Stddev", "Sum"]  # fmt: skip
