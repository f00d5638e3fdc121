"""A dependency outage, said once: a log line when it begins and when it ends, a Prometheus
gauge while it lasts, and a registry row (shown on the Dagster assets) once it is over.

A process that polls Postgres every few seconds would otherwise print a traceback per poll;
an operator wants one line, a metric to alert on, and the outage's length afterwards.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

from prometheus_client import Counter, Gauge

from fennel_dagster.metadata.registry import OutageRow

UNREACHABLE = Gauge(
    "fennel_dependency_unreachable",
    "1 while this process cannot reach the service",
    ["process", "service"],
)
OUTAGES = Counter(
    "fennel_dependency_outages",
    "Outages of a service this process rode out (or is riding out)",
    ["process", "service"],
)


class Outage:
    def __init__(self, process: str, service: str, log: logging.Logger) -> None:
        self.process = process
        self.service = service
        self.log = log
        self._since: float | None = None  # monotonic
        self._began_at: datetime | None = None
        self._error = ""
        UNREACHABLE.labels(process, service).set(0)

    @property
    def active(self) -> bool:
        return self._since is not None

    def begin(self, error: BaseException, doing: str = "") -> None:
        """Idempotent: only the first call of an outage logs."""
        if self._since is not None:
            return
        self._since = time.monotonic()
        self._began_at = datetime.now(UTC)
        self._error = f"{type(error).__name__}: {str(error).strip()}"
        UNREACHABLE.labels(self.process, self.service).set(1)
        OUTAGES.labels(self.process, self.service).inc()
        self.log.warning("%s: %s unreachable (%s)%s", self.process, self.service,
                         self._error, f"; {doing}" if doing else "")  # fmt: skip

    def end(self) -> OutageRow | None:
        """The outage just over (to record once the service is back), or None if there was none."""
        if self._since is None or self._began_at is None:
            return None
        seconds = time.monotonic() - self._since
        row = OutageRow(self.process, self.service, self._began_at, seconds, self._error)
        self._since = self._began_at = None
        UNREACHABLE.labels(self.process, self.service).set(0)
        self.log.warning("%s: %s reachable again after %.1fs", self.process, self.service, seconds)
        return row
