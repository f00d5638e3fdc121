"""Per-featureset request statistics of this server over a sliding window, published to the
metadata store every few seconds so Dagster shows them on the featureset assets (Prometheus
has the same numbers as histograms; this is the per-featureset view a Dagster user reads)."""

from __future__ import annotations

import threading
import time
from collections import deque

import numpy as np

from fennel_dagster.metadata.server_stats import FeaturesetStats


class FeaturesetWindow:
    def __init__(self, server: str, window_s: float = 60.0) -> None:
        self.server = server
        self.window_s = window_s
        self._seen: deque[tuple[float, str, str, float, bool]] = deque()
        self._lock = threading.Lock()

    def record(self, branch: str, featuresets: set[str], seconds: float, failed: bool) -> None:
        now = time.monotonic()
        with self._lock:
            for fs in featuresets:
                self._seen.append((now, branch, fs, seconds * 1000, failed))

    def snapshot(self) -> list[FeaturesetStats]:
        """The window as it stands; featuresets with no request in it are not reported."""
        cutoff = time.monotonic() - self.window_s
        with self._lock:
            while self._seen and self._seen[0][0] < cutoff:
                self._seen.popleft()
            seen = list(self._seen)
        groups: dict[tuple[str, str], list[tuple[float, bool]]] = {}
        for _, branch, fs, ms, failed in seen:
            groups.setdefault((branch, fs), []).append((ms, failed))
        out = []
        for (branch, fs), items in sorted(groups.items()):
            lat = np.array([m for m, _ in items])
            out.append(FeaturesetStats(
                self.server, branch, fs, self.window_s, len(items), sum(f for _, f in items),
                float(np.percentile(lat, 50)), float(np.percentile(lat, 99)),
            ))  # fmt: skip
        return out
