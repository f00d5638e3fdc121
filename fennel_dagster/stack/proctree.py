"""The machine's process table, read from /proc (Linux): who is whose child, and what a
process tree costs in CPU and memory. The benchmarks measure contenders by their trees; the
tests find an engine's runners (children of its fork server) the same way."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    state: str  # "R", "S", "Z" ...
    cpu_s: float  # its own user + system time
    reaped_cpu_s: float  # the time of the children it has reaped


def table() -> dict[int, Proc]:
    """Every process now; one that exits while being read is left out."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            f = stat.read_text().rsplit(")", 1)[1].split()
            pid = int(stat.parent.name)
            out[pid] = Proc(pid, int(f[1]), f[0], (int(f[11]) + int(f[12])) / _TICK,
                            (int(f[13]) + int(f[14])) / _TICK)  # fmt: skip
        except (OSError, IndexError, ValueError):
            continue
    return out


def descendants(pid: int, procs: dict[int, Proc] | None = None) -> list[int]:
    """The processes under ``pid`` (not itself), nearest first."""
    procs = table() if procs is None else procs
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    out, frontier = [], [pid]
    while frontier:
        frontier = sorted(c for p in frontier for c in children.get(p, []))
        out += frontier
    return out


def tree_cpu(pid: int, reaped: bool = True) -> float:
    """CPU seconds of ``pid`` and every live process under it; ``reaped``: also what the
    children they reaped used (gunicorn recycles workers: their CPU must not vanish)."""
    procs = table()
    total = 0.0
    for p in [pid, *descendants(pid, procs)]:
        if p in procs:
            total += procs[p].cpu_s + (procs[p].reaped_cpu_s if reaped else 0.0)
    return total


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and every process under it."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for p in [pid, *descendants(pid)]:
        try:
            total += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue
    return total


def cmdline(pid: int) -> bytes:
    """``pid``'s command line, NUL-separated; empty if it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
