"""SIGKILLs for the exactly-once and at-least-once tests: runners of a supervisor killed at
random while events flow, then all at once so they restart without crash points."""

from __future__ import annotations

import os
import random
import signal
import time

from fennel_dagster.engine.supervisor import Supervisor


def kill_at_random(
    sup: Supervisor, seconds: float, rnd: random.Random, pause: tuple[float, float] = (0.2, 0.5)
) -> int:
    """For ``seconds``, SIGKILL one live runner of ``sup`` every ``pause`` seconds (drawn
    uniformly); returns how many were killed."""
    kills = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(rnd.uniform(*pause))
        alive = [r for r in list(sup.runners.values()) if r.process.is_alive()]
        if alive:
            try:
                os.kill(rnd.choice(alive).process.pid, signal.SIGKILL)  # type: ignore[arg-type]
                kills += 1
            except ProcessLookupError:
                pass
    return kills


def kill_all(sup: Supervisor) -> int:
    """SIGKILL every live runner of ``sup`` (its supervisor restarts them); returns how many."""
    kills = 0
    for r in {id(r.process): r for r in list(sup.runners.values())}.values():  # shared: once
        if r.process.is_alive():
            try:
                os.kill(r.process.pid, signal.SIGKILL)  # type: ignore[arg-type]
                kills += 1
            except ProcessLookupError:
                pass
    return kills


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")
