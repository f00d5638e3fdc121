"""The runtime hook behind ``Dataset.lookup`` inside extractors.

An executor (the mock client, a query server) installs a provider for the duration of an
extractor run; the same provider serves the live class (``UserSpend.lookup``) and the
handles seeded into shipped code (``DatasetHandle``). Outside any run, a test's
``UserSpend.lookup(ts, uid=...)`` is answered, as in Fennel, by the mock client that
committed last (``serve_outside_runs``).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd

from fennel_dagster.errors import QueryError

LookupProvider = Callable[
    [str, pd.Series, pd.DataFrame, list[str] | None], tuple[pd.DataFrame, pd.Series]
]

_provider: contextvars.ContextVar[LookupProvider | None] = contextvars.ContextVar(
    "fennel_lookup_provider", default=None
)


_outside_runs: LookupProvider | None = None


class LookupOutsideExtractorError(QueryError, RuntimeError):
    pass


def serve_outside_runs(provider: LookupProvider) -> None:
    """The mock client that committed last answers lookups made outside extractor runs."""
    global _outside_runs
    _outside_runs = provider


@contextlib.contextmanager
def lookups_served_by(provider: LookupProvider) -> Iterator[None]:
    token = _provider.set(provider)
    try:
        yield
    finally:
        _provider.reset(token)


def lookup(
    dataset: str, ts: pd.Series, fields: list[str] | None = None, **keys: Any
) -> tuple[pd.DataFrame, pd.Series]:
    provider = _provider.get() or _outside_runs
    if provider is None:
        raise LookupOutsideExtractorError(
            f"{dataset}.lookup called outside an extractor run: lookups are answered by the "
            "executor running the extractor (MockClient.query or a query server), or in a "
            "test by the MockClient that committed it"
        )
    keys_df = pd.DataFrame({k: pd.Series(v).reset_index(drop=True) for k, v in keys.items()})
    return provider(dataset, pd.Series(ts).reset_index(drop=True), keys_df, fields)


class DatasetHandle:
    """What a dataset's name means inside shipped extractor code: ``lookup`` only."""

    def __init__(self, name: str, fields: tuple[str, ...] = ()) -> None:
        self.__fennel_dataset_name__ = name
        self._fields = fields

    def lookup(
        self, ts: pd.Series, fields: list[str] | None = None, **keys: Any
    ) -> tuple[pd.DataFrame, pd.Series]:
        return lookup(self.__fennel_dataset_name__, ts, fields, **keys)

    def __getattr__(self, item: str) -> str:
        if item in self._fields:
            return item
        raise AttributeError(f"dataset {self.__fennel_dataset_name__} has no field {item!r}")
