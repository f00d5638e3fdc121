"""Where a window's right end comes from while a batch is recorded: the held top-level tile
that holds the query's time plus the batch's own events, while nothing held in that tile is
later than the query (a stream in order) — one entry read a key instead of the finer tiles
and raw events of the open tile."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fennel_dagster.ops import tiles
from fennel_dagster.ops.aggregate.events import Events
from fennel_dagster.ops.aggregate.layout import Layout, lows
from fennel_dagster.ops.aggregate.stats import Source, Table, pair_codes, sorted_table

# The largest top tile a window's right end is taken from: finding that nothing held in it is
# later than a query reads the key's raw events there, all of them where some are (a late
# event), so that read is bounded by this much time (an hour's window has 64 s tiles).
EDGE_TILE_MAX = 128 * tiles.US


@dataclass
class Edges:
    """For the queries in ``use``, window ``w``'s right end is the tile of ``size[w]`` holding
    the query's time, from ``tables[size]`` (the held tiles and the batch's events, positions
    in time); the other queries read their right ends as lookups do."""

    size: dict[tuple[str, int | None], int]
    use: np.ndarray
    tables: dict[int, Table]


def edge_sizes(lay: Layout, hi: np.ndarray) -> dict[tuple[str, int | None], int] | None:
    """Per window, its coarsest tile size, when every query's window holds a whole tile of it
    and that size is at most ``EDGE_TILE_MAX``; None when some window has none.

    Longer windows (a day, ``forever``) read as before: checking their top tile raw would read
    up to all of a key's newer events for one late event."""
    out = {}
    for w, lv in lay.windows.items():
        top = lv[0]
        if top > EDGE_TILE_MAX or not (-(-lows(w, hi) // top) < (hi + 1) // top).all():
            return None
        out[w] = top
    return out or None


def check_until(hi: np.ndarray, sizes: dict[tuple[str, int | None], int]) -> np.ndarray:
    """Per query, the end of the coarsest edge tile holding its time: an event held before
    it and after the query rules the edge tile out."""
    top = max(sizes.values())
    return (hi // top + 1) * top


def late(events: Events, qk: np.ndarray, hi: np.ndarray, until: np.ndarray) -> np.ndarray:
    """Per query, whether an event held by its key falls in ``(hi, until)``."""
    held = Source(events.kid, events.ts, np.ones(len(events.kid), np.int64))
    after, end = held.locate(qk, [hi + 1, until])
    return np.asarray(end > after)


def held_tiles(level: Table, qk: np.ndarray, idx: np.ndarray, size: int) -> Table:
    """The held tiles at (key id, tile index) of the queries, positioned at their start time."""
    if not len(level.kid) or not len(qk):
        return level.take(np.zeros(0, np.int64))
    mine, wanted = pair_codes([level.kid, qk], [level.pos, idx])
    out = level.take(np.flatnonzero(np.isin(mine, wanted)))
    out.pos = out.pos * size
    return out


def with_fresh(
    sizes: dict[tuple[str, int | None], int], use: np.ndarray, held: dict[int, Table], fresh: Table
) -> Edges:
    """The edges once the batch is recorded: each size's held tiles and the batch's events."""
    tables = {t: sorted_table(Table.concat([h, fresh])) for t, h in held.items()}
    return Edges(sizes, use, tables)
