"""Aggregations for ``groupby(...).aggregate(...)``, with Fennel's names and parameters."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

from fennel_dagster.declare.errors import DeclarationError
from fennel_dagster.declare.window import Window, duration
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
        params = dict(self.params)
        if "default" in params:
            params["default"] = _plain(params["default"])
        return spec.AggSpec(
            kind=self.kind, into=into, window=self.window.to_ir(), of=self.of, **params
        )


def _plain(default: Any) -> Any:
    """A default as the IR holds it (plain data): a date or datetime as its ISO text (UTC),
    a Decimal as its text; the output field's type reads it back."""
    if isinstance(default, dt.datetime):
        aware = default if default.tzinfo else default.replace(tzinfo=dt.UTC)
        return aware.astimezone(dt.UTC).isoformat()
    if isinstance(default, dt.date):
        return default.isoformat()
    return str(default) if isinstance(default, decimal.Decimal) else default


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

    def __init__(  # Fennel's default for a window without values: -1.0
        self, of: str, window: Window | None = None, default: float = -1.0, into_field: str = ""
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
            raise DeclarationError(  # Fennel's wording first
                f"Expect p value between 0 and 1, found {p}: Quantile(of={of!r}) takes p "
                "within [0, 1], e.g. p=0.5 for the median"
            )
        super().__init__(of, window, into_field, p=float(p), default=default, approx=approx)


class ExpDecaySum(Aggregation):
    """Fennel's ``ExpDecaySum(of, window, half_life)``: the sum over a continuous window of
    each value times ``0.5 ** (age / half_life)``, its age taken at the time the dataset is
    read (so the value changes with the lookup time). A float; 0.0 over no rows. Like every
    continuous-window aggregate, it makes its dataset terminal."""

    kind = "exp_decay"

    def __init__(
        self,
        of: str,
        window: Window | None = None,
        half_life: str | int = "",
        into_field: str = "",
    ) -> None:
        where = f"ExpDecaySum(of={of!r}, half_life={half_life!r})"
        if half_life == "" or half_life is None:
            raise DeclarationError(f"{where}: give half_life=, a duration such as '1d'")
        seconds = duration(half_life, f"{where} half_life")
        if seconds <= 0:
            raise DeclarationError(f"{where}: half_life must be longer than 0, e.g. '1d'")
        super().__init__(of, window, into_field, half_life=seconds)

    def to_ir(self, into: str, where: str) -> spec.AggSpec:
        out = super().to_ir(into, where)
        if out.window.kind not in ("continuous", "forever"):
            raise DeclarationError(
                f"{where}: ExpDecaySum for '{into}' takes a continuous window, not "
                f"{out.window.kind}: use window=Continuous('7d') or Continuous('forever')"
            )
        return out
