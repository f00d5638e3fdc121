"""The engine's own metrics: per job partition, messages in, rows out, bad rows, batch
latency and input lag, exported on the engine's ``GET /metrics`` like every other metric.

Runners are processes of their own, so their metrics use prometheus-client's multiprocess
mode: each runner process writes its values to files in a directory its supervisor owns
(``use_directory``, called first thing in the runner process), and the supervisor's endpoint
merges them (``collect``). A runner inside a Dagster run keeps them in process instead.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, values
from prometheus_client import multiprocess as mp_metrics
from prometheus_client.metrics_core import Metric

ENV = "PROMETHEUS_MULTIPROC_DIR"


@dataclass(frozen=True)
class RunnerMetrics:
    messages: Counter
    outputs: Counter
    errors: Counter
    batch_seconds: Histogram
    lag: Gauge
    snapshot_bytes: Counter
    snapshot_seconds: Histogram
    handed: Counter


_made: RunnerMetrics | None = None
_making = threading.Lock()


def use_directory(path: Path) -> None:
    """In a runner process, before its first metric: write values where the supervisor reads."""
    path.mkdir(parents=True, exist_ok=True)
    os.environ[ENV] = str(path)
    values.ValueClass = values.get_value_class()  # chosen at import; choose again


def runner_metrics() -> RunnerMetrics:
    global _made
    with _making:  # writers sharing a process (engine.sharing) start side by side
        if _made is None:
            labels = ["job", "partition"]
            _made = RunnerMetrics(
                Counter("fennel_engine_messages", "Input messages processed", labels),
                Counter("fennel_engine_outputs", "Rows written to output topics", labels),
                Counter("fennel_engine_bad_rows", "Rows sent to the error topic", labels),
                Histogram("fennel_engine_batch_seconds",
                          "One transaction: process, commit, apply", ["job"],
                          buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)),
                Gauge("fennel_engine_lag_messages", "Input messages not yet consumed", labels,
                      multiprocess_mode="livesum"),
                Counter("fennel_engine_snapshot_bytes",
                        "Bytes snapshots uploaded (files not stored before, and manifests)",
                        labels),
                Histogram("fennel_engine_snapshot_seconds",
                          "One snapshot's upload and prune, in its background thread", ["job"],
                          buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)),
                Counter("fennel_engine_handed_messages",
                        "Input messages a chain handed its pipeline in memory (engine.chain)",
                        labels),
            )  # fmt: skip
        return _made


def reset_directory(path: Path) -> None:
    """A supervisor starting: values of its previous life's runners are gone with them."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, exist_ok=True)


def runner_exited(path: Path, pid: int) -> None:
    """Its live gauges (lag) leave the sum; its counters stay counted."""
    mp_metrics.mark_process_dead(pid, str(path))


def collect(path: Path | None) -> bytes:
    """This process's metrics, plus its runner processes' when they write to ``path``."""
    out = generate_latest()
    if path is not None and path.is_dir():
        registry = CollectorRegistry()
        registry.register(_RunnerFamilies(path))
        out += generate_latest(registry)
    return out


class _RunnerFamilies:
    """The runners' engine metrics only: families this process also has (outage gauges)
    would otherwise appear twice in one exposition, which Prometheus rejects."""

    def __init__(self, path: Path) -> None:
        self.inner = mp_metrics.MultiProcessCollector(None, path=str(path))

    def collect(self) -> Iterable[Metric]:
        return [m for m in self.inner.collect() if m.name.startswith("fennel_engine_")]
