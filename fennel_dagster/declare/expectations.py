"""``@expectations``: great-expectations configurations attached to a dataset.

The functions build plain ``(type, kwargs)`` descriptions; the Dagster asset checks turn
them into great-expectations ``ExpectationConfiguration``s and run them on samples.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fennel_dagster.wire import spec


def _exp(kind: str, **kwargs: Any) -> spec.ExpectationSpec:
    pairs = tuple(
        sorted((k, tuple(v) if isinstance(v, list | set | tuple) else v) for k, v in kwargs.items())
    )
    return spec.ExpectationSpec(type=kind, kwargs=pairs)


def expect_column_values_to_not_be_null(column: str, mostly: float = 1.0) -> spec.ExpectationSpec:
    return _exp("expect_column_values_to_not_be_null", column=column, mostly=mostly)


def expect_column_values_to_be_between(
    column: str, min_value: float | None = None, max_value: float | None = None, mostly: float = 1.0
) -> spec.ExpectationSpec:
    return _exp(
        "expect_column_values_to_be_between",
        column=column, min_value=min_value, max_value=max_value, mostly=mostly,
    )  # fmt: skip


def expect_column_values_to_be_in_set(
    column: str, value_set: list[Any], mostly: float = 1.0
) -> spec.ExpectationSpec:
    return _exp(
        "expect_column_values_to_be_in_set",
        column=column,
        value_set=sorted(value_set),
        mostly=mostly,
    )


def expect_column_values_to_be_unique(column: str, mostly: float = 1.0) -> spec.ExpectationSpec:
    return _exp("expect_column_values_to_be_unique", column=column, mostly=mostly)


def expect_column_values_to_match_regex(
    column: str, regex: str, mostly: float = 1.0
) -> spec.ExpectationSpec:
    return _exp("expect_column_values_to_match_regex", column=column, regex=regex, mostly=mostly)


def expect_column_mean_to_be_between(
    column: str, min_value: float | None = None, max_value: float | None = None
) -> spec.ExpectationSpec:
    return _exp(
        "expect_column_mean_to_be_between", column=column, min_value=min_value, max_value=max_value
    )


def expectations(fn: Callable[..., list[spec.ExpectationSpec]]) -> Any:
    """Decorates ``def my_expectations(cls): return [expect_...(...), ...]`` in a dataset."""
    fn.__fennel_expectations__ = True  # type: ignore[attr-defined]
    return classmethod(fn)
