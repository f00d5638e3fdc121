"""Progress of a Spark job as a user follows it: tasks done of all, stage, elapsed, ETA."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Progress:
    stage: str
    tasks_done: int
    tasks_total: int
    elapsed_s: float

    @property
    def fraction(self) -> float:
        return self.tasks_done / self.tasks_total if self.tasks_total else 0.0

    @property
    def eta_s(self) -> float | None:
        """Seconds left if the remaining tasks go as fast as the done ones (None: unknown)."""
        if not self.tasks_done:
            return None
        return self.elapsed_s * (self.tasks_total - self.tasks_done) / self.tasks_done

    def bar(self, width: int = 30) -> str:
        filled = int(self.fraction * width)
        eta = "" if self.eta_s is None else f", ETA {self.eta_s:.0f}s"
        return (f"[{'#' * filled}{'.' * (width - filled)}] {self.tasks_done}/{self.tasks_total} "
                f"tasks, {self.stage}, {self.elapsed_s:.0f}s{eta}")  # fmt: skip


class Watch:
    """The reporting thread of ``watch``; ``set()`` stops it after one last report."""

    def __init__(self, loop: Callable[[threading.Event], None]) -> None:
        self._done = threading.Event()
        self._thread = threading.Thread(target=loop, args=(self._done,), daemon=True)
        self._thread.start()

    def set(self) -> None:
        self._done.set()
        self._thread.join(10)


def watch(spark: Any, on_progress: Callable[[Progress], None], started: float) -> Watch:
    """Report Spark's task progress every half second until ``set()``, and once more at the
    end (all tasks seen done), so even a job faster than the first tick reports."""
    tracker = spark.sparkContext.statusTracker()

    def loop(done: threading.Event) -> None:
        last = Progress("spark", 0, 0, 0.0)
        while not done.wait(0.5):
            stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
            stages = [s for s in stages if s is not None]
            if stages:
                total = sum(s.numTasks for s in stages)
                finished = sum(s.numCompletedTasks for s in stages)
                name = stages[0].name.split(" at ")[0]
                last = Progress(name, finished, total, time.monotonic() - started)
                on_progress(last)
        on_progress(Progress(last.stage, last.tasks_total, last.tasks_total,
                             time.monotonic() - started))  # fmt: skip

    return Watch(loop)
