"""Recording a batch, a window's right end may come from the held tile that holds the query's
time plus the batch's events (``edges.edge_sizes``) instead of the events held in it,
and its left end is not sought where its top tile is not held. Every emitted value must
still be the brute-force one, for in-order and late events alike."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fennel_dagster.ops.aggregate.continuous import LEVELS_KEY, StateFormatError, run_continuous
from fennel_dagster.ops.aggregate.edges import edge_sizes
from fennel_dagster.ops.aggregate.events import tiles_namespace
from fennel_dagster.ops.aggregate.layout import Layout
from fennel_dagster.ops.aggregate.newest import is_newest_key
from fennel_dagster.ops.state import MemoryState, OverlayReader, StateReader, WriteBatch
from fennel_dagster.wire import spec

T0 = pd.Timestamp("2026-01-01", tz="UTC")
US = 1_000_000


def node(*windows: spec.WindowSpec, raw: bool = False) -> spec.AggregateNode:
    aggs = []
    for i, w in enumerate(windows):
        aggs += [
            spec.AggSpec("count", f"n{i}", w),
            spec.AggSpec("sum", f"s{i}", w, of="amount"),
            spec.AggSpec("min", f"lo{i}", w, of="amount"),
            spec.AggSpec("max", f"hi{i}", w, of="amount"),
        ]
    if raw:
        aggs.append(spec.AggSpec("lastk", "k", windows[0], of="amount", limit=3, dedup=False))
    return spec.AggregateNode("n1", "n0", ("uid",), tuple(aggs))


def frame(rows: list[tuple[int, int, float]]) -> pd.DataFrame:
    return pd.DataFrame(
        {"uid": pd.array([r[0] for r in rows], dtype="Int64"),
         "amount": pd.array([r[2] for r in rows], dtype="Float64"),
         "ts": [T0 + pd.Timedelta(microseconds=r[1]) for r in rows]}
    )  # fmt: skip


def record(state: StateReader, n: spec.AggregateNode, rows: list[Any]) -> pd.DataFrame:
    wb = WriteBatch()
    out = run_continuous(n, "agg", frame(rows), "ts", OverlayReader(state, wb), wb)
    assert isinstance(state, MemoryState)
    state.apply(wb)
    return out


def expected(n: spec.AggregateNode, seen: list[Any], uid: int, t: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in n.aggs:
        w = a.window
        lo = -(1 << 62) if w.kind == "forever" else t - (w.duration or 0) * US
        vals = [r[2] for r in seen if r[0] == uid and lo <= r[1] <= t]
        i = a.into
        if a.kind == "count":
            out[i] = len(vals)
        elif a.kind == "sum":
            out[i] = math.fsum(vals)
        elif a.kind == "min":
            out[i] = min(vals)
        elif a.kind == "max":
            out[i] = max(vals)
    return out


HOUR = 3600 * US
stamps = st.one_of(
    st.integers(0, 3 * HOUR),  # sparse: an edge tile of a few events
    st.integers(HOUR - 5 * US, HOUR + 5 * US),  # dense, across a coarse tile start
    st.integers(2 * HOUR - 3 * US, 2 * HOUR + 3 * US),  # and the window's far end an hour on
)
events = st.lists(
    st.tuples(
        st.integers(1, 3),
        stamps,
        st.floats(-1e6, 1e6, allow_nan=False).map(lambda v: round(v, 3)),
        st.sampled_from([0, 0, 0, 0, -30 * US, -2 * US, -1, 7 * US]),  # arrival: late or early
    ),
    min_size=1,
    max_size=60,
)
WINDOWS = {
    "hour, 100 s": (
        spec.WindowSpec("continuous", duration=3600),
        spec.WindowSpec("continuous", duration=100),
    ),
    "hour, forever (no edge tile)": (
        spec.WindowSpec("continuous", duration=3600),
        spec.WindowSpec("forever"),
    ),
    "an hour and 40 minutes (one top level)": (
        spec.WindowSpec("continuous", duration=3600),
        spec.WindowSpec("continuous", duration=2400),
    ),
    "a second (no edge tile)": (
        spec.WindowSpec("continuous", duration=1),
        spec.WindowSpec("continuous", duration=3600),
    ),
}


# Tile layouts a state may have been written with (``continuous.LEVELS_KEY``): a new
# state's (top levels in pages of 16 tiles), pages of 3 (a page boundary in most windows),
# and a tile an entry (state written before pages).
LAYOUTS = {"pages of 16": None, "pages of 3": b"p3", "a tile an entry": b"2"}


def in_layout(n: spec.AggregateNode, layout: str) -> MemoryState:
    """An empty state whose tiles will be written in ``layout``."""
    state = MemoryState()
    mark = LAYOUTS[layout]
    if mark is not None:
        state.apply(WriteBatch.of({(tiles_namespace("agg", n), LEVELS_KEY): mark}))
    return state


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("raw", [False, True], ids=["tiled", "with lastk"])
@pytest.mark.parametrize("windows", list(WINDOWS), ids=list(WINDOWS))
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=events, cuts=st.lists(st.integers(1, 59), max_size=6))
def test_every_emitted_value_is_the_brute_force_one(
    windows: str, raw: bool, layout: str, rows: list[Any], cuts: list[int]
) -> None:
    n = node(*WINDOWS[windows], raw=raw)
    arrival = sorted(rows, key=lambda r: r[1] + r[3])  # mostly in order, some late
    bounds = [0, *sorted({c for c in cuts if c < len(arrival)}), len(arrival)]
    state = in_layout(n, layout)
    seen: list[Any] = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        batch = [(u, t, v) for u, t, v, _ in arrival[a:b]]
        out = record(state, n, batch)
        seen += batch
        for i, (uid, t, _) in enumerate(batch):
            got = out.iloc[i]
            for into, value in expected(n, seen, uid, t).items():
                assert got[into] == value, (into, uid, t, batch)


class Counting(MemoryState):
    """Counts the entries its range scans return (``tiles_read``: of tiles namespaces)."""

    read = 0
    tiles_read = 0

    def scan_ranges(
        self, ns: str, bounds: list[tuple[bytes, bytes]]
    ) -> tuple[list[tuple[bytes, bytes]], list[int]]:
        items, counts = super().scan_ranges(ns, bounds)
        self.read += len(items)
        if ns.endswith(":tiles"):
            self.tiles_read += len(items)
        return items, counts


def test_a_live_key_reads_its_edge_tile_not_its_events() -> None:
    """Without the edge tile a batch read each key's events since the last 2 s tile start and
    the finer tiles since the last top tile start; here 200 events a key are held there. With
    it, a key reads the tile it records into at each level, and nothing else."""
    n = node(spec.WindowSpec("continuous", duration=3600))
    state = Counting()
    base = 10 * HOUR + 64 * US  # a 64 s tile starts here
    rng = np.random.default_rng(3)
    held = [
        (u, base + int(x), 1.0) for u in (1, 2) for x in np.sort(rng.uniform(0, 61.9 * US, 200))
    ]
    record(state, n, sorted(held, key=lambda r: r[1]))
    state.read = 0
    out = record(state, n, [(1, base + 62 * US, 2.0), (2, base + 63 * US, 3.0)])
    assert state.read <= 2 * len(Layout.of(n).sizes), state.read
    assert out["n0"].tolist() == [201, 201] and out["s0"].tolist() == [202.0, 203.0]
    late = record(state, n, [(1, base + 30 * US, 5.0)])  # held events after it: read them
    assert late["n0"].tolist() == [1 + sum(1 for u, t, _ in held if u == 1 and t <= base + 30 * US)]


@pytest.mark.parametrize(
    ("window", "edge"),
    [
        (spec.WindowSpec("continuous", duration=3600), 64 * US),
        (spec.WindowSpec("continuous", duration=86400), None),
        (spec.WindowSpec("forever"), None),
    ],
)
def test_only_windows_of_small_top_tiles_take_their_right_end_from_one(
    window: spec.WindowSpec, edge: int | None
) -> None:
    """Checking a top tile for later events reads its raw events; a day's (2048 s) or
    forever's top tile could hold all of a key's newer events, read for one late event."""
    sizes = edge_sizes(Layout.of(node(window)), np.array([10 * HOUR]))
    assert (None if sizes is None else sizes[("continuous", 3600)]) == edge


def _forget_newest(state: MemoryState) -> None:
    """Drop every key's newest-event entry, as state written before them lacks them."""
    wb = WriteBatch()
    for ns in [ns for ns in state._data if ns.endswith(":tiles")]:
        for key in [k for k in state._data[ns] if is_newest_key(k)]:
            wb.delete(ns, key)
    state.apply(wb)


@pytest.mark.parametrize("windows", ["hour, 100 s", "a second (no edge tile)"])
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    rows=events,
    cuts=st.lists(st.integers(1, 59), max_size=6),
    forget=st.lists(st.booleans(), min_size=7, max_size=7),
    again=st.lists(st.integers(0, 59), max_size=4),
)
def test_values_stay_brute_force_where_the_newest_entries_are_missing(
    windows: str, rows: list[Any], cuts: list[int], forget: list[bool], again: list[int]
) -> None:
    """State written before a key's newest-event entry (``newest``) has none: the key's last
    raw event stands in for it. Identical events (``again``: an event sent twice, in a later
    batch) count as often as they come, at an instant held or not."""
    n = node(*WINDOWS[windows])
    arrival = sorted(rows, key=lambda r: r[1] + r[3])
    arrival += [arrival[i] for i in again if i < len(arrival)]
    bounds = [0, *sorted({c for c in cuts if c < len(arrival)}), len(arrival)]
    state = MemoryState()
    seen: list[Any] = []
    for j, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)):
        if forget[j % len(forget)]:
            _forget_newest(state)
        batch = [(u, t, v) for u, t, v, _ in arrival[a:b]]
        out = record(state, n, batch)
        seen += batch
        for i, (uid, t, _) in enumerate(batch):
            for into, value in expected(n, seen, uid, t).items():
                assert out.iloc[i][into] == value, (into, uid, t, batch)


class RawSeeks(MemoryState):
    """Counts the seeks its reads of raw events (not tiles) make: ranges, and last entries."""

    seeks = 0

    def scan_ranges(
        self, ns: str, bounds: list[tuple[bytes, bytes]]
    ) -> tuple[list[tuple[bytes, bytes]], list[int]]:
        if not ns.endswith(":tiles"):
            self.seeks += len(bounds)
        return super().scan_ranges(ns, bounds)

    def last(self, ns: str, start: bytes, end: bytes) -> tuple[bytes, bytes] | None:
        if not ns.endswith(":tiles"):
            self.seeks += 1
        return super().last(ns, start, end)


def test_a_key_in_order_seeks_no_raw_events() -> None:
    """A key whose newest held event is older than its batch's events reads none of its raw
    events (a live key within its first window: no left end either); an event at the newest
    held one's instant reads them, and a key without the entry finds its last event once."""
    n = node(spec.WindowSpec("continuous", duration=3600))
    state = RawSeeks()
    base = 10 * HOUR
    record(state, n, [(1, base, 1.0), (2, base + US, 1.0)])
    state.seeks = 0
    out = record(state, n, [(1, base + 2 * US, 2.0), (2, base + 3 * US, 3.0)])
    assert state.seeks == 0
    assert out["n0"].tolist() == [2, 2]
    out = record(state, n, [(1, base + 2 * US, 2.0)])  # the same event again, at its instant
    assert state.seeks == 1 and out["n0"].tolist() == [3]
    state.seeks = 0
    _forget_newest(state)
    out = record(state, n, [(2, base + 4 * US, 1.0)])
    assert state.seeks == 1 and out["n0"].tolist() == [3]
    state.seeks = 0
    out = record(state, n, [(2, base + 5 * US, 1.0)])  # the entry is back
    assert state.seeks == 0 and out["n0"].tolist() == [4]


def test_a_late_batch_does_not_move_the_newest_event_back() -> None:
    """After a late event, the key's newest is still the later one held: an event between the
    two must not take its right end from the edge tile, which holds the later event."""
    n = node(spec.WindowSpec("continuous", duration=3600))
    state = MemoryState()
    base = 10 * HOUR  # one 64 s tile from here
    record(state, n, [(1, base + 20 * US, 1.0)])
    assert record(state, n, [(1, base + 5 * US, 1.0)])["n0"].tolist() == [1]
    assert record(state, n, [(1, base + 10 * US, 1.0)])["n0"].tolist() == [2]
    assert record(state, n, [(1, base + 30 * US, 1.0)])["n0"].tolist() == [4]


class TileRanges(MemoryState):
    """Counts the ranges its scans of tiles ask for."""

    ranges = 0

    def scan_ranges(
        self, ns: str, bounds: list[tuple[bytes, bytes]]
    ) -> tuple[list[tuple[bytes, bytes]], list[int]]:
        if ns.endswith(":tiles"):
            self.ranges += len(bounds)
        return super().scan_ranges(ns, bounds)


def test_a_tile_newer_than_every_held_event_is_not_sought() -> None:
    """The finer tile an event records into is read to fold into it, unless the key's newest
    held event is older than the tile's start: then no event, so no tile, is there."""
    n = node(spec.WindowSpec("continuous", duration=3600))
    state = TileRanges()
    base = 10 * HOUR  # a 64 s tile starts here
    record(state, n, [(1, base, 1.0)])
    state.ranges = 0
    assert record(state, n, [(1, base + 10 * US, 2.0)])["s0"].tolist() == [3.0]
    fresh_tile = state.ranges
    state.ranges = 0
    assert record(state, n, [(1, base + 10 * US + 500_000, 4.0)])["s0"].tolist() == [7.0]
    assert state.ranges == fresh_tile + 1


@pytest.mark.parametrize(("layout", "most"), [("pages of 16", 8), ("a tile an entry", 70)])
def test_a_window_of_held_tiles_reads_them_as_a_few_pages(layout: str, most: int) -> None:
    """A key with an event every 50 s holds every 64 s tile of its hour: one tile an entry, a
    batch reads the ~57 of them; in pages of 16, at most five pages (an hour spans 3.5 pages
    of 1,024 s) and the finer tiles of the window's two ends."""
    n = node(spec.WindowSpec("continuous", duration=3600))
    held = [(1, 10 * HOUR + i * 50 * US, float(i)) for i in range(150)]
    state = in_layout(n, layout)
    record(state, n, held[:75])
    record(state, n, held[75:149])
    assert isinstance(state, MemoryState)
    counting = Counting()
    counting._data, counting._order = state._data, state._order
    out = record(counting, n, [held[149]])
    read = counting.tiles_read
    assert read <= most and (layout != "a tile an entry" or read >= 50)
    assert out.iloc[0].to_dict() == {"uid": 1, "ts": out.iloc[0]["ts"],
                                     **expected(n, held, 1, held[149][1])}  # fmt: skip


def test_a_state_of_an_unknown_layout_is_refused_by_name() -> None:
    n = node(spec.WindowSpec("continuous", duration=3600))
    state = MemoryState()
    state.apply(WriteBatch.of({(tiles_namespace("agg", n), LEVELS_KEY): b"q7"}))
    with pytest.raises(StateFormatError, match="agg.*unknown tile layout marker b'q7'"):
        record(state, n, [(1, HOUR, 1.0)])


def test_an_empty_batch_records_nothing_and_emits_no_row() -> None:
    """A batch whose rows were all dropped upstream (a windowed dedup that emits nothing yet)
    reaches the aggregate empty, on new state and on held state alike."""
    n = node(spec.WindowSpec("continuous", 3600), raw=True)
    state = MemoryState()
    assert record(state, n, []).empty
    record(state, n, [(1, 5 * US, 2.0)])
    assert record(state, n, []).empty
    again = record(state, n, [(1, 6 * US, 3.0)])
    assert again["n0"].tolist() == [2] and again["s0"].tolist() == [5.0]
