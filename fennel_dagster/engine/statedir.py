"""Local state directories: ``<state>/<engine id>/<job>/p<n>``, one RocksDB hangar each.

An engine keeps only the partitions it runs: the next owner restores from S3, so a copy left
behind would fill the disk — and a stale one must never meet a job of the same name again.
A directory whose RocksDB lock another process holds is in use and is left alone. Engine
runs on one host share a root and start together, so two may clear the same stale state at
once: what the other one removed first is simply gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("fennel_dagster.engine.statedir")


def partitions(root: Path) -> list[tuple[str, int, Path]]:
    """(job name, partition, directory) of every partition state under one engine's root."""
    if not root.is_dir():
        return []
    out = []
    for job_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        try:
            parts = sorted(job_dir.glob("p*"))
        except FileNotFoundError:  # another cleaner removed it since the listing
            continue
        out += [(job_dir.name, int(p.name[1:]), p) for p in parts if p.name[1:].isdigit()]
    return out


def in_use(path: Path) -> bool:
    """Whether another process has this RocksDB open (it holds the POSIX lock on LOCK)."""
    lock = path / "LOCK"
    if not lock.exists():
        return False
    try:
        with open(lock, "r+b") as f:
            fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.lockf(f, fcntl.LOCK_UN)
    except OSError:
        return True
    return False


def drop_unowned(root: Path, owned: Callable[[str, int], bool], who: str) -> list[Path]:
    """Delete the partition states under ``root`` that ``owned`` rejects and nobody has open."""
    dropped = []
    for job, partition, path in partitions(root):
        if owned(job, partition) or in_use(path):
            continue
        shutil.rmtree(path, ignore_errors=True)
        dropped.append(path)
        log.info("%s: dropped local state of %s p%d (not owned)", who, job, partition)
        with contextlib.suppress(OSError):  # gone already, or not empty: another one's
            path.parent.rmdir()
    return dropped
