"""What ``fennel-dagster demo`` shows: the platform's state, gathered and rendered.

A collector thread gathers a ``Snapshot`` every few seconds (the stack's services, the
commit's progress, engine runs alive, events/s, each dataset's freshness as its runners
report it, and the features queried over HTTP); the demo renders the newest one in place
(rich ``Live``) on a terminal, or prints it now and then when its output is captured.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import pandas as pd
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from fennel_dagster import stack
from fennel_dagster.engine.health import DatasetHealth, stream_health
from fennel_dagster.engine.keepalive import DEAD_AFTER_S
from fennel_dagster.metadata import registry
from fennel_dagster.metadata.db import connect
from fennel_dagster.settings import Settings


@dataclass(frozen=True)
class Snapshot:
    at: datetime
    services: tuple[tuple[str, bool, str], ...] = ()  # name, healthy, endpoint
    phase: str = "starting"
    runs_alive: int = 0
    runs_expected: int = 0
    produced: int = 0  # events the demo sent
    produced_per_s: float = 0.0
    datasets: tuple[DatasetHealth, ...] = ()
    features: pd.DataFrame | None = None
    features_note: str = "not queried yet"
    links: tuple[str, ...] = ()


@dataclass
class Collector:
    """Gathers snapshots on a thread of its own; ``phase``, ``links``, ``produced`` and
    ``query`` are set by the demo as it goes."""

    settings: Settings
    query: Callable[[], pd.DataFrame] | None = None
    phase: str = "starting"
    links: tuple[str, ...] = ()
    produced: int = 0
    every_s: float = 3.0
    latest: Snapshot = field(default_factory=lambda: Snapshot(datetime.now(UTC)))
    _stop: threading.Event = field(default_factory=threading.Event)
    _rate: tuple[float, int] = (0.0, 0)

    def start(self) -> None:
        threading.Thread(target=self._run, name="demo-status", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        services: tuple[tuple[str, bool, str], ...] = ()
        features: pd.DataFrame | None = None
        note, last_services, last_query = "not queried yet", 0.0, 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            if now - last_services > 15:
                services = tuple(
                    (s.name, s.health.ok, s.endpoint) for s in stack.status(self.settings)
                )
                last_services = now
            if self.query is not None and now - last_query > 10:
                last_query = now
                try:
                    features, note = self.query(), "queried over HTTP"
                except Exception as e:  # noqa: BLE001 - shown: engine runs still starting
                    note = f"not queryable yet: {str(e).splitlines()[0][:160]}"
            alive, expected, datasets = self._engine()
            t0, n0 = self._rate
            rate = (self.produced - n0) / (now - t0) if t0 and now > t0 else 0.0
            self._rate = (now, self.produced)
            self.latest = replace(
                self.latest, at=datetime.now(UTC), services=services, phase=self.phase,
                runs_alive=alive, runs_expected=expected, produced=self.produced,
                produced_per_s=rate, datasets=datasets, features=features,
                features_note=note, links=self.links,
            )  # fmt: skip
            self._stop.wait(self.every_s)

    def _engine(self) -> tuple[int, int, tuple[DatasetHealth, ...]]:
        s = self.settings
        try:
            with connect(s, s.pg_schema, autocommit=True) as conn:
                jobs = registry.list_jobs(conn)
                beats = registry.runner_owners(conn)
                health = tuple(stream_health(conn))
        except Exception:  # noqa: BLE001 - nothing committed yet, or Postgres restarting
            return 0, 0, ()
        expected = {(j.hash, p) for j in jobs for p in range(j.partitions)}
        alive = sum(1 for k, (_, age) in beats.items() if k in expected and age < DEAD_AFTER_S)
        return alive, len(expected), health


def render(s: Snapshot) -> RenderableType:
    services = Text("  ").join(
        Text(f"{name} {'up' if ok else 'DOWN'}", style="green" if ok else "bold red")
        for name, ok, _ in s.services
    )
    head = Table.grid(padding=(0, 2))
    head.add_row("services", services if s.services else Text("checking ...", style="dim"))
    head.add_row("commit", s.phase)
    runs = f"{s.runs_alive} of {s.runs_expected} job partitions running"
    head.add_row("engine runs", Text(runs, style="green" if s.runs_alive else "yellow"))
    head.add_row("events", f"{s.produced:,} sent, {s.produced_per_s:.1f}/s")
    parts: list[RenderableType] = [head]
    if s.datasets:
        fresh = Table(title="datasets (as their runners report)", title_justify="left")
        for col in ("dataset", "rows", "bad rows", "lag", "newest event", "event age"):
            fresh.add_column(col, justify="left" if col in ("dataset", "newest event") else "right")
        for d in s.datasets:
            age = (s.at - d.newest_event).total_seconds() if d.newest_event else None
            fresh.add_row(
                d.dataset if d.branch == "main" else f"{d.branch}/{d.dataset}",
                f"{d.rows:,}", f"{d.bad_rows:,}", "-" if d.lag is None else f"{d.lag:,}",
                d.newest_event.strftime("%H:%M:%S") if d.newest_event else "-",
                "-" if age is None else f"{age:.1f}s",
            )  # fmt: skip
        parts.append(fresh)
    feats = Table(title=f"features ({s.features_note})", title_justify="left")
    if s.features is not None and not s.features.empty:
        for c in s.features.columns:
            feats.add_column(str(c).split(".", 1)[-1], justify="right")
        for row in s.features.itertuples(index=False):
            feats.add_row(*(_cell(v) for v in row))
        parts.append(feats)
    else:
        parts.append(Text(f"features: {s.features_note}", style="yellow"))
    parts += [Text(link, style="cyan") for link in s.links]
    return Panel(Group(*parts), title=f"fennel-dagster demo  {s.at:%H:%M:%S} UTC", expand=False)


def _cell(v: object) -> str:
    if isinstance(v, float):
        return f"{v:,.2f}"
    return "-" if v is None or v is pd.NA else str(v)
