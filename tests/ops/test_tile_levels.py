"""Tile levels go down to 2 s, so a dense key reads few raw edge events; state written with
the coarser levels of before (no marker, tiles down to 64 s) is still read with those, and
state of a tile an entry (before pages) with that."""

from __future__ import annotations

import struct

import numpy as np
import pandas as pd

from fennel_dagster.ops import tiles
from fennel_dagster.ops.aggregate import run_continuous
from fennel_dagster.ops.aggregate.continuous import LEVELS_KEY
from fennel_dagster.ops.aggregate.newest import is_newest_key
from fennel_dagster.ops.state import MemoryState, WriteBatch
from fennel_dagster.wire import spec

T0 = pd.Timestamp("2026-01-01", tz="UTC")
US = 1_000_000
W = spec.WindowSpec("continuous", duration=3600)
NODE = spec.AggregateNode(
    "n1", "n0", ("uid",),
    (spec.AggSpec("count", "n", W), spec.AggSpec("sum", "total", W, of="v"),
     spec.AggSpec("max", "high", W, of="v"), spec.AggSpec("sum", "all", spec.WindowSpec("forever"), of="v")),
)  # fmt: skip
NS = "agg:Out.agg:n1"


def test_levels_reach_two_seconds_and_each_divides_the_one_before() -> None:
    assert tiles.levels("continuous", 3600) == (64 * US, 2 * US)
    assert tiles.levels("continuous", 3600, legacy=True) == (64 * US,)
    assert tiles.levels("continuous", 86400, legacy=True) == (2048 * US, 64 * US)
    for d in (1, 60, 600, 3600, 86400, 30 * 86400, None):
        sizes = tiles.levels("forever" if d is None else "continuous", d)
        assert sizes[-1] <= tiles.FINEST
        assert all(a % b == 0 for a, b in zip(sizes, sizes[1:], strict=False))


def _dense(n: int, start: pd.Timestamp, seed: int) -> pd.DataFrame:
    """Several events a second per key, as a live stream gives them."""
    rnd = np.random.default_rng(seed)
    ts = start + pd.to_timedelta(np.sort(rnd.integers(0, 90_000, n)), unit="ms")
    return pd.DataFrame({"uid": rnd.integers(0, 3, n), "v": rnd.integers(1, 50, n).astype(float),
                         "ts": ts})  # fmt: skip


def _run(state: MemoryState, rows: pd.DataFrame) -> list[dict[str, object]]:
    wb = WriteBatch()
    out = run_continuous(NODE, "Out.agg", rows, "ts", state, wb)
    state.apply(wb)
    return out[["n", "total", "high", "all"]].to_dict("records")


def _as_legacy(state: MemoryState) -> None:
    """What the code before wrote: no marker, no newest-event entries, and no tile of a
    level finer than 64 s."""
    tns = NS + ":tiles"
    wb = WriteBatch()
    wb.delete(tns, LEVELS_KEY)
    for key, _ in state.scan(tns, b""):
        if key == LEVELS_KEY:
            continue
        if is_newest_key(key) or struct.unpack(">QQ", key[-16:])[0] < 64 * US:
            wb.delete(tns, key)
    state.apply(wb)


def _unpaged() -> MemoryState:
    """A state whose tiles are written one an entry, as before pages (legacy state was)."""
    state = MemoryState()
    state.apply(WriteBatch.of({(NS + ":tiles", LEVELS_KEY): b"2"}))
    return state


def test_state_of_the_coarser_levels_is_read_with_them_and_gives_the_same_values() -> None:
    first, second = _dense(400, T0, 1), _dense(400, T0 + pd.Timedelta(seconds=60), 2)
    new = MemoryState()
    _run(new, first)
    assert new.get(NS + ":tiles", LEVELS_KEY) == b"p16"
    want = _run(new, second)

    unpaged = _unpaged()
    _run(unpaged, first)
    assert _run(unpaged, second) == want
    assert unpaged.get(NS + ":tiles", LEVELS_KEY) == b"2"

    old = _unpaged()
    _run(old, first)
    _as_legacy(old)
    got = _run(old, second)
    assert old.get(NS + ":tiles", LEVELS_KEY) == b"1"
    assert got == want
    # read with the new levels, the legacy state would miss the 2 s tiles it never had
    wrong = _unpaged()
    _run(wrong, first)
    _as_legacy(wrong)
    wrong.apply(WriteBatch.of({(NS + ":tiles", LEVELS_KEY): b"2"}))
    assert _run(wrong, second) != want
