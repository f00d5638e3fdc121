"""Aggregations for ``groupby(...).aggregate(...)``, with Fennel's names and parameters."""

from __future__ import annotations

from typing import Any

from fennel_dagster.declare.errors import DeclarationError
from fennel_dagster.declare.window import Window
from fennel_dagster.wire import spec


class Aggregation:
    kind: spec.AggKind
    needs_of = True

    def __init__(
        self,
        of: str | None = None,
        window: Window | None = None,
        into_field: str = "",
        **params: Any,
    ) -> None:
        self.of, self.window, self.into_field, self.params = of, window, into_field, params

    def to_ir(self, into: str, where: str) -> spec.AggSpec:
        name = type(self).__name__
        if self.window is None:
            raise DeclarationError(
                f"{where}: {name}(...) for '{into}' has no window; pass "
                "window=Continuous('7d') (or 'forever'), Tumbling, Hopping or Session"
            )
        if self.needs_of and not self.of:
            raise DeclarationError(f"{where}: {name} for '{into}' needs of=<field to aggregate>")
        return spec.AggSpec(
            kind=self.kind, into=into, window=self.window.to_ir(), of=self.of, **self.params
        )


class Count(Aggregation):
    kind = "count"
    needs_of = False

    def __init__(
        self,
        of: str | None = None,
        window: Window | None = None,
        unique: bool = False,
        approx: bool = False,
        into_field: str = "",
        dropnull: bool = False,
    ) -> None:
        if unique and not of:
            raise DeclarationError("Count(unique=True) needs of=<field whose values to count>")
        super().__init__(of, window, into_field, unique=unique, approx=approx, dropnull=dropnull)


class Sum(Aggregation):
    kind = "sum"

    def __init__(self, of: str, window: Window | None = None, into_field: str = "") -> None:
        super().__init__(of, window, into_field)


class Avg(Aggregation):
    kind = "avg"

    def __init__(
        self, of: str, window: Window | None = None, default: float = 0.0, into_field: str = ""
    ) -> None:
        super().__init__(of, window, into_field, default=default)


Average = Avg


class Min(Aggregation):
    kind = "min"

    def __init__(
        self, of: str, window: Window | None = None, default: Any = None, into_field: str = ""
    ) -> None:
        super().__init__(of, window, into_field, default=default)


class Max(Aggregation):
    kind = "max"

    def __init__(
        self, of: str, window: Window | None = None, default: Any = None, into_field: str = ""
    ) -> None:
        super().__init__(of, window, into_field, default=default)


class Stddev(Aggregation):
    kind = "stddev"

    def __init__(
        self, of: str, window: Window | None = None, default: float = 0.0, into_field: str = ""
    ) -> None:
        super().__init__(of, window, into_field, default=default)


class LastK(Aggregation):
    kind: spec.AggKind = "lastk"

    def __init__(
        self,
        of: str,
        limit: int,
        dedup: bool,
        window: Window | None = None,
        dropnull: bool = False,
        into_field: str = "",
    ) -> None:
        super().__init__(of, window, into_field, limit=limit, dedup=dedup, dropnull=dropnull)


class FirstK(LastK):
    """The first ``limit`` values in event-time order (LastK's mirror image)."""

    kind: spec.AggKind = "firstk"


class Distinct(Aggregation):
    kind = "distinct"

    def __init__(
        self,
        of: str,
        window: Window | None = None,
        unordered: bool = True,
        dropnull: bool = False,
        into_field: str = "",
    ) -> None:
        if not unordered:
            raise DeclarationError(
                "Distinct(unordered=False) is not supported: pass unordered=True"
            )
        super().__init__(of, window, into_field, dropnull=dropnull)


class Quantile(Aggregation):
    kind = "quantile"

    def __init__(
        self,
        of: str,
        p: float,
        window: Window | None = None,
        default: float | None = None,
        approx: bool = False,
        into_field: str = "",
    ) -> None:
        if not 0.0 <= p <= 1.0:
            raise DeclarationError(f"Quantile(of={of!r}, p={p}): p must be within [0, 1]")
        super().__init__(of, window, into_field, p=float(p), default=default, approx=approx)
