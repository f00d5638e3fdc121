"""What a continuous aggregate node keeps: the columns it reads, which aggregations come from
tiles (and at which tile sizes) and which are assembled from raw events."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fennel_dagster.ops import tiles
from fennel_dagster.wire import spec

US = 1_000_000
# Tiles a page holds at each window's top level, in state written with pages (``pages``): a
# window reads and writes a key's ~56 top tiles as 4 or 5 entries, each a few kB at most.
TOP_PAGE = 16
TILED = frozenset({"count", "sum", "avg", "min", "max", "stddev"})


def of_columns(node: spec.AggregateNode) -> list[str]:
    return sorted({a.of for a in node.aggs if a.of})


def _tiled(agg: spec.AggSpec) -> bool:
    return agg.kind in TILED and not (agg.kind == "count" and agg.unique)


def wkey(w: spec.WindowSpec) -> tuple[str, int | None]:
    return (w.kind, None if w.kind == "forever" else w.duration)


@dataclass
class Layout:
    """What a continuous aggregate node keeps in tiles and what it assembles from raw events."""

    tiled: list[spec.AggSpec]
    raw: list[spec.AggSpec]
    windows: dict[tuple[str, int | None], tuple[int, ...]]
    sizes: tuple[int, ...]
    cols: dict[str, bool]  # tiled column -> keeps sums of squares (a stddev reads it)
    extremes: frozenset[str]  # tiled columns a min or max reads
    fields: list[str]  # every column an aggregation reads (the raw event's fields), sorted
    pages: dict[int, int]  # tile size -> tiles one state entry holds, where more than one

    @classmethod
    def of(cls, node: spec.AggregateNode, legacy: bool = False, page: int = 1) -> Layout:
        """``legacy``: for state written with the coarser levels of before (``tiles.levels``);
        ``page``: how many tiles an entry of each window's top level holds."""
        tiled = [a for a in node.aggs if _tiled(a)]
        windows = {
            wkey(a.window): tiles.levels(a.window.kind, a.window.duration, legacy) for a in tiled
        }
        cols: dict[str, bool] = {}
        for a in tiled:
            if a.of:
                cols[a.of] = cols.get(a.of, False) or a.kind == "stddev"
        sizes = tuple(sorted({s for lv in windows.values() for s in lv}))
        extremes = frozenset(a.of for a in tiled if a.of and a.kind in ("min", "max"))
        raw = [a for a in node.aggs if not _tiled(a)]
        pages = {lv[0]: page for lv in windows.values()} if page > 1 else {}
        return cls(tiled, raw, windows, sizes, cols, extremes, of_columns(node), pages)

    def page(self, size: int) -> int:
        """How many tiles of ``size`` one state entry holds (their page: index // this)."""
        return self.pages.get(size, 1)


def lows(w: tuple[str, int | None], hi: np.ndarray) -> np.ndarray:
    if w[0] == "forever":
        return np.full(len(hi), tiles.NEG_INF, dtype=np.int64)
    return hi - (w[1] or 0) * US  # [t - duration, t]: both ends included, as in Fennel
