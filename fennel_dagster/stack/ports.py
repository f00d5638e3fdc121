"""The local stack's fixed ports: who owns each, whether another process holds it.

Two stacks on one machine (a CI clone beside a developer's stack, two CI runs) would
otherwise meet on the defaults and fail deep inside a JVM's bind. ``stack up`` checks a
service's ports before it starts one, and ``stack ports --reassign-busy`` gives a run
free ports for the defaults something else holds.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from fennel_dagster.settings import ENV_PREFIX, Settings

# the settings fields naming each service's listening ports; "dagster" and "serve" are the
# Dagster webserver and the query server that `demo`, `dev` and the tests start
SERVICE_PORTS: dict[str, tuple[str, ...]] = {
    "postgres": ("pg_port",),
    "kafka": ("kafka_port", "kafka_controller_port"),
    "s3": ("s3_port",),
    "registry": ("registry_port",),
    "dagster": ("dagster_port",),
    "serve": ("serve_port",),
}


@dataclass(frozen=True)
class Port:
    service: str
    field: str
    number: int

    @property
    def env(self) -> str:
        return f"{ENV_PREFIX}{self.field.upper()}"


def ports(settings: Settings, service: str | None = None) -> list[Port]:
    names = [service] if service else list(SERVICE_PORTS)
    return [
        Port(name, field, int(getattr(settings, field)))
        for name in names
        for field in SERVICE_PORTS.get(name, ())
    ]


def bindable(host: str, port: int) -> bool:
    """True when nothing listens on ``host:port`` (the bind a server would make succeeds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def _listening_inodes(numbers: Collection[int]) -> dict[int, set[str]]:
    """The socket inodes listening on each of ``numbers``, from the kernel's tables (Linux):
    each table read once, however many ports are asked."""
    out: dict[int, set[str]] = {n: set() for n in numbers}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            port = int(f[1].rsplit(":", 1)[1], 16)
            if f[3] == "0A" and port in out:  # 0A: LISTEN
                out[port].add(f[9])
    return out


def holds_all(pid: int, numbers: Collection[int]) -> bool:
    """True when process ``pid`` is the one listening on every port of ``numbers``."""
    listening = _listening_inodes(numbers)
    if not all(listening.values()):
        return False
    if not listening:  # nothing asked: as ``all`` of nothing
        return True
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    own = set()
    for fd in fds:
        try:
            own.add(os.readlink(fd))
        except OSError:
            continue
    return all(own & {f"socket:[{i}]" for i in inodes} for inodes in listening.values())


def busy(settings: Settings, service: str) -> list[Port]:
    return [p for p in ports(settings, service) if not bindable(settings.host, p.number)]


def busy_message(service: str, taken: list[Port]) -> str:
    where = ", ".join(f"{p.number} ({p.env})" for p in taken)
    return (
        f"{service}: port {where} is held by another process, not by this stack. Stop that "
        f"process, or give this stack other ports: set the variable(s) named, or run "
        f'`eval "$(fennel-dagster stack ports --reassign-busy)"` first.'
    )


def reassign_busy(
    settings: Settings, ours: Collection[str] = (), explicit: Collection[str] | None = None
) -> dict[str, int]:
    """A free port for each default another process holds.

    Left alone: ports of ``ours`` (services this stack runs) and ports the user chose
    (``explicit``, default: the fields set by argument, environment or settings file), since
    a collision there is the user's to resolve and ``stack up`` reports it. A new port is
    searched upward from the default, skipping ones already handed out, so the choice is
    predictable (59093 taken: 59094, not a random one).
    """
    chosen = settings.model_fields_set if explicit is None else explicit
    handed = {p.number for p in ports(settings)}
    out: dict[str, int] = {}
    for p in ports(settings):
        if p.service in ours or p.field in chosen or bindable(settings.host, p.number):
            continue
        candidate = p.number + 1
        while candidate in handed or not bindable(settings.host, candidate):
            candidate += 1
            if candidate > 65535:
                raise OSError(f"no free port above {p.number} for {p.env}")
        handed.add(candidate)
        out[p.env] = candidate
    return out
