"""Windows and durations, as in Fennel: ``Continuous("7d")``, ``Tumbling("1h")``, ..."""

from __future__ import annotations

import re

from fennel_dagster.declare.errors import DeclarationError
from fennel_dagster.wire import spec

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_PART = re.compile(r"(\d+)\s*([smhdwy])")


def duration(text: str | int, where: str = "duration") -> int:
    """Seconds in ``"1h30m"``-style text (or an int of seconds)."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    s = str(text).strip().lower().replace(" ", "")
    parts = _PART.findall(s)
    if not s or "".join(n + u for n, u in parts) != s:
        raise DeclarationError(
            f"{where}: {text!r} is not a duration; write e.g. '30s', '15m', '1h', '7d', '1w'"
        )
    return sum(int(n) * _UNITS[u] for n, u in parts)


_seconds = duration  # the parser, under a name the windows' ``duration=`` keyword leaves free


class WindowError(DeclarationError, ValueError):
    """A window that cannot be built (a ``ValueError`` too, as Fennel raises for windows)."""


class Window:
    def to_ir(self) -> spec.WindowSpec:
        raise NotImplementedError


class Continuous(Window):
    def __init__(self, duration: str) -> None:
        self.forever = str(duration).strip().lower() == "forever"
        self.length = None if self.forever else _seconds(duration, f"Continuous({duration!r})")

    def to_ir(self) -> spec.WindowSpec:
        if self.forever:
            return spec.WindowSpec(kind="forever")
        return spec.WindowSpec(kind="continuous", duration=self.length)


class Tumbling(Window):
    def __init__(self, duration: str, lookback: str | int = 0) -> None:
        if str(duration).strip().lower() == "forever":
            raise WindowError(
                "'forever' is not a valid duration value for Tumbling window; use "
                "Continuous('forever') for an unbounded window, or a length like Tumbling('1h')"
            )
        self.duration = _seconds(duration, f"Tumbling({duration!r})")
        self.lookback = _seconds(lookback, "Tumbling lookback") if lookback else 0

    @property
    def stride(self) -> int:
        """A tumbling window starts where the last one ended: its stride is its length."""
        return self.duration

    def to_ir(self) -> spec.WindowSpec:
        return spec.WindowSpec(
            kind="tumbling", duration=self.duration, stride=self.stride, lookback=self.lookback
        )


class Hopping(Window):
    """``Hopping("forever", "1h")``: everything before each hour's end, emitted hourly."""

    def __init__(self, duration: str, stride: str, lookback: str | int = 0) -> None:
        self.forever = str(duration).strip().lower() == "forever"
        self.duration: int | None = (
            None if self.forever else _seconds(duration, f"Hopping({duration!r})")
        )
        self.stride = _seconds(stride, f"Hopping stride {stride!r}")
        if self.duration is not None and self.stride > self.duration:
            raise DeclarationError(
                f"Hopping({duration!r}, {stride!r}): the stride is longer than the window; "
                "use a stride <= duration (or Tumbling when they are equal)"
            )
        self.lookback = _seconds(lookback, "Hopping lookback") if lookback else 0

    def to_ir(self) -> spec.WindowSpec:
        return spec.WindowSpec(
            kind="hopping", duration=self.duration, stride=self.stride, lookback=self.lookback
        )


class Session(Window):
    def __init__(self, gap: str) -> None:
        self.gap = _seconds(gap, f"Session({gap!r})")

    def to_ir(self) -> spec.WindowSpec:
        return spec.WindowSpec(kind="session", gap=self.gap)
