"""What declarations mean beyond their shape, installed from above.

Fennel type-checks an expression (``Expr.typeof``), evaluates it (``Expr.eval``), shows a
stream's schema inside a pipeline body (``Node.schema()``) and rejects a pipeline whose
schema does not fit its dataset when ``@dataset`` runs, not at commit. The type checker and
the evaluator that give those answers live in layers above the declarations (``commit``,
``ops``); the package root installs them here (``fennel_dagster.semantics``), so the
declaration layer keeps importing nothing above it.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import pandas as pd

from fennel_dagster.wire import spec

if TYPE_CHECKING:
    from fennel_dagster.declare.expr import Expr


class Semantics(Protocol):
    def typeof(self, e: Expr, schema: Mapping[str, Any]) -> Any: ...

    def eval(self, e: Expr, df: pd.DataFrame, schema: Mapping[str, Any]) -> pd.Series: ...

    def pipeline_problems(
        self, ds: spec.DatasetSpec, datasets: Mapping[str, spec.DatasetSpec]
    ) -> list[tuple[str, str]]:
        """Each problem as (our words with the fix, Fennel's words or "")."""
        ...

    def node_schema(
        self, nodes: Sequence[spec.Node], node_id: str, datasets: Mapping[str, spec.DatasetSpec]
    ) -> dict[str, spec.DType]: ...


_installed: list[Semantics] = []
_deferred = contextvars.ContextVar("fennel_checks_deferred", default=False)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Declarations inside are checked at commit only: for tests of the commit's own rules,
    and for tools that generate repositories and want every error in one report."""
    token = _deferred.set(True)
    try:
        yield
    finally:
        _deferred.reset(token)


def checks_deferred() -> bool:
    return _deferred.get()


def install(impl: Semantics) -> None:
    _installed[:] = [impl]


def installed() -> Semantics:
    if not _installed:
        raise RuntimeError("fennel_dagster's semantics are not installed: import fennel_dagster")
    return _installed[0]
