"""Clear errors for missing system prerequisites, naming what to install."""

from __future__ import annotations

import glob
import shutil
from pathlib import Path

from fennel_dagster.stack.process import StackError

_HINTS = {
    "java": "Java 17: apt-get install -y openjdk-17-jre-headless",
    "mvn": "Maven: apt-get install -y maven",
    "initdb": "PostgreSQL server: apt-get install -y postgresql",
}


def require(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        raise StackError(f"`{binary}` not found on PATH. Install {_HINTS.get(binary, binary)}")
    return path


def postgres_bin(name: str) -> str:
    """A PostgreSQL server binary (Debian keeps them out of PATH, under its versioned dir)."""
    found = shutil.which(name)
    if found:
        return found
    for candidate in sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True):
        if Path(candidate).exists():
            return candidate
    raise StackError(f"PostgreSQL's `{name}` not found. Install {_HINTS['initdb']}")
