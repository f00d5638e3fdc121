"""Fault injection for the engine's crash tests: SIGKILL ourselves at named moments.

``FENNEL_ENGINE_CRASH="after_commit:0.05,mid_batch:0.05,during_snapshot:0.5"`` makes a
runner kill itself with that probability each time it passes the point. Unset: no cost
beyond one dict lookup.
"""

from __future__ import annotations

import os
import random
import signal

POINTS = ("mid_batch", "after_commit", "during_snapshot", "mid_replay")


def _parse(raw: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in raw.split(","))):
        name, _, prob = part.partition(":")
        if name not in POINTS:
            raise ValueError(f"FENNEL_ENGINE_CRASH: unknown point {name!r}; known: {POINTS}")
        out[name] = float(prob or 1.0)
    return out


_ARMED: dict[str, float] = {}


def arm() -> None:
    """Read ``FENNEL_ENGINE_CRASH`` (at import, and again in a forked runner: its environment
    is its supervisor's at the fork, not the one this module was imported with)."""
    global _ARMED
    _ARMED = _parse(os.environ.get("FENNEL_ENGINE_CRASH", ""))


arm()


def maybe_crash(point: str) -> None:
    prob = _ARMED.get(point)
    if prob and random.random() < prob:
        os.kill(os.getpid(), signal.SIGKILL)
