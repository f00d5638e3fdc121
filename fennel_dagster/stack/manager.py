"""``stack up | down | status``: the services in start order, each health-checked."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from fennel_dagster.settings import Settings
from fennel_dagster.stack.kafka import Kafka
from fennel_dagster.stack.ports import busy, busy_message, holds_all, ports
from fennel_dagster.stack.postgres import Postgres
from fennel_dagster.stack.process import StackError
from fennel_dagster.stack.registry import SchemaRegistry
from fennel_dagster.stack.s3 import S3Server
from fennel_dagster.stack.service import Health, Service
from fennel_dagster.stack.spark import Spark

SERVICES: dict[str, type[Service]] = {
    "postgres": Postgres,
    "kafka": Kafka,
    "s3": S3Server,
    "registry": SchemaRegistry,
    "spark": Spark,
}


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    endpoint: str
    pid: int | None
    health: Health
    action: str = ""  # "started", "already running", "stopped", ...
    seconds: float = 0.0

    def line(self) -> str:
        state = "up" if self.health.ok else "DOWN"
        pid = f"pid {self.pid}" if self.pid else "-"
        took = f"{self.seconds:5.1f}s" if self.seconds else ""
        return (
            f"{self.name:<9} {state:<5} {self.endpoint:<22} {pid:<11} {took:>6}  "
            f"{self.action + ': ' if self.action else ''}{self.health.detail}"
        )


def _select(settings: Settings, names: Iterable[str] | None) -> list[Service]:
    wanted = list(names) if names else list(SERVICES)
    unknown = [n for n in wanted if n not in SERVICES]
    if unknown:
        raise StackError(f"unknown service(s) {unknown}; known: {', '.join(SERVICES)}")
    return [SERVICES[n](settings) for n in SERVICES if n in wanted]


def up(
    settings: Settings,
    names: Iterable[str] | None = None,
    report: Callable[[ServiceStatus], None] = lambda s: None,
) -> list[ServiceStatus]:
    """Start what is not running; leave running healthy services alone.

    A running service is restarted when it is ours but unhealthy, or when its pom changed
    since it started (new jars), so ``up`` after a version bump gives the current stack.
    """
    out = []
    for svc in _select(settings, names):
        t0 = time.monotonic()
        pid = svc.running_pid()
        health = svc.health() if (pid or svc.name == "spark") else Health(False, "not running")
        current = svc.jars_current()
        if health.ok and current:
            status = ServiceStatus(svc.name, svc.endpoint(), pid, health, "already running")
        else:
            action = "started"
            if pid is not None:
                action = "restarted (new jars)" if health.ok else "restarted (was unhealthy)"
                svc.stop()
            else:
                taken = busy(settings, svc.name)
                if taken:
                    raise StackError(busy_message(svc.name, taken))
            svc.start()
            status = ServiceStatus(
                svc.name,
                svc.endpoint(),
                svc.running_pid(),
                svc.health(),
                action,
                time.monotonic() - t0,
            )
        report(status)
        out.append(status)
    return out


def down(settings: Settings, names: Iterable[str] | None = None) -> list[ServiceStatus]:
    out = []
    for svc in reversed(_select(settings, names)):
        pid = svc.running_pid()
        stopped = svc.stop()
        action = f"stopped pid {pid}" if stopped else "was not running"
        if svc.name == "spark":
            action = "no daemon (runs in-process)"
        out.append(ServiceStatus(svc.name, svc.endpoint(), None, Health(False, "stopped"), action))
    return out


def status(settings: Settings, names: Iterable[str] | None = None) -> list[ServiceStatus]:
    out = []
    for svc in _select(settings, names):
        pid = svc.running_pid()
        if pid is None and svc.name != "spark":
            health = Health(False, "stopped")
        else:
            health = svc.health()
        out.append(ServiceStatus(svc.name, svc.endpoint(), pid, health))
    return out


def running(settings: Settings) -> set[str]:
    """The services whose daemon this stack started and that listen on these settings' ports.

    The pid alone is not enough: the same home with other ports (a changed settings file)
    has our daemon running while another process holds the ports asked for.
    """
    out = set()
    for svc in _select(settings, None):
        pid = svc.running_pid()
        if pid is not None and holds_all(pid, [p.number for p in ports(settings, svc.name)]):
            out.add(svc.name)
    return out


def log_path(settings: Settings, name: str) -> str:
    return _select(settings, [name])[0].log_path()
