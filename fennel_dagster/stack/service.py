"""What every service of the local stack offers to ``stack up/down/status``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from fennel_dagster.settings import Settings


@dataclass(frozen=True)
class Health:
    ok: bool
    detail: str


class Service(Protocol):
    name: str

    def __init__(self, settings: Settings) -> None: ...

    def endpoint(self) -> str: ...

    def running_pid(self) -> int | None:
        """Our live process, or None; services without a daemon return None."""
        ...

    def start(self) -> None:
        """Prepare (jars, initdb, format) if needed and start; returns once it answers."""
        ...

    def stop(self) -> bool: ...

    def health(self) -> Health:
        """A real round trip against the service (a query, a transaction, a put/get)."""
        ...

    def log_path(self) -> str: ...

    def jars_current(self) -> bool:
        """False when the jars on disk are not those the service's pom asks for."""
        ...
