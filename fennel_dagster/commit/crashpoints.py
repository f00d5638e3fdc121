"""Named crash points of the commit protocol, armed by tests to raise or to SIGKILL us.

Arm in-process with ``arm("after_commit_point", "raise")`` or, for a child process, with
``FENNEL_CRASH_AT=after_commit_point`` and ``FENNEL_CRASH_MODE=kill`` (or ``raise``). A name
may carry ``@N`` to fire on its N-th visit only (``after_create_asset@2``).
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Callable

POINTS = (
    "after_recovery",
    "after_creation_intent",
    "before_create_asset",
    "after_create_asset",
    "before_commit_point",
    "after_commit_point",
    "before_destroy_asset",
    "after_destroy_asset",
    "after_destructions",
)


class CrashPointHit(RuntimeError):
    """Raised at an armed crash point in ``raise`` mode."""


_armed: dict[str, str | Callable[[], None]] = {}
_visits: Counter[str] = Counter()


def arm(point: str, mode: str | Callable[[], None] = "raise") -> None:
    """``mode``: "raise", "kill", or a callable to run there (e.g. drop a connection)."""
    base = point.split("@")[0]
    if base not in POINTS:
        raise ValueError(f"unknown crash point {point!r}; known: {', '.join(POINTS)}")
    _armed[point] = mode
    _visits[base] = 0  # "@N" counts visits from the moment of arming


def disarm() -> None:
    _armed.clear()
    _visits.clear()


def crash_point(name: str) -> None:
    _visits[name] += 1
    armed: dict[str, str | Callable[[], None]] = dict(_armed)
    env_point = os.environ.get("FENNEL_CRASH_AT")
    if env_point:
        armed.setdefault(env_point, os.environ.get("FENNEL_CRASH_MODE", "kill"))
    for point, mode in armed.items():
        base, _, nth = point.partition("@")
        if base == name and (not nth or int(nth) == _visits[name]):
            if callable(mode):
                mode()
                continue
            if mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise CrashPointHit(f"crash point {name} (visit {_visits[name]})")
