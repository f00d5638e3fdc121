"""Dedup in a tumbling or session window: the last row per (by values, window) is kept, with
its own timestamp, and emitted once the watermark closes the window; dedup without a window
drops exact repeats (same by values and time) at once."""

from __future__ import annotations

import random

import pandas as pd

from fennel_dagster.ops.pipeline import PipelineExecutor
from fennel_dagster.ops.state import MemoryState, WriteBatch
from fennel_dagster.wire import spec

T0 = pd.Timestamp("2026-03-01", tz="UTC")
ORDER = spec.DatasetSpec(
    "Order",
    1,
    (
        spec.FieldSpec("oid", spec.IntType()),
        spec.FieldSpec("qty", spec.IntType()),
        spec.FieldSpec("ts", spec.TimestampType(), timestamp=True),
    ),
)
TUMBLING = spec.WindowSpec("tumbling", duration=60, stride=60)
SESSION = spec.WindowSpec("session", gap=30)


def dedup(window: spec.WindowSpec | None, by: tuple[str, ...] = ("oid",)) -> PipelineExecutor:
    nodes = (spec.InputNode("i", "Order"), spec.DedupNode("d", "i", by, window))
    return PipelineExecutor(spec.PipelineSpec("p", "Out", ("Order",), nodes, "d"), {"Order": ORDER})


def orders(*rows: tuple[int, int, float]) -> pd.DataFrame:
    """(oid, qty, seconds after T0) rows."""
    return pd.DataFrame(
        {
            "oid": pd.array([r[0] for r in rows], dtype="Int64"),
            "qty": pd.array([r[1] for r in rows], dtype="Int64"),
            "ts": pd.to_datetime([T0 + pd.Timedelta(seconds=r[2]) for r in rows], utc=True),
        }
    )


class Stream:
    """Feeds batches through one executor and state, as the engine and the mock do."""

    def __init__(self, window: spec.WindowSpec | None, by: tuple[str, ...] = ("oid",)) -> None:
        self.ex = dedup(window, by)
        self.state = MemoryState()

    def log(self, df: pd.DataFrame) -> list[tuple[int, int, float]]:
        res = self.ex.run("Order", df, self.state)
        self.state.apply(res.writes)
        out = res.rows
        return [
            (int(o), int(q), (t - T0).total_seconds())
            for o, q, t in zip(out["oid"], out["qty"], out["ts"], strict=True)
        ]


def test_a_tumbling_window_keeps_its_last_row_with_that_rows_time() -> None:
    s = Stream(TUMBLING)
    # window [0, 60) of order 1 holds qty 1, 2, 3; the row at 75 s closes nothing yet
    assert s.log(orders((1, 2, 30), (1, 1, 10), (1, 3, 59), (1, 9, 75))) == [(1, 3, 59.0)]
    # order 2's window [0, 60) is late (the watermark passed 60 s): dropped
    assert s.log(orders((2, 5, 20))) == []
    assert s.log(orders((1, 4, 119), (3, 1, 130))) == [(1, 4, 119.0)]


def test_an_open_window_emits_nothing_until_the_watermark_reaches_its_end() -> None:
    s = Stream(TUMBLING)
    assert s.log(orders((1, 1, 0), (1, 2, 30))) == []
    assert s.log(orders((1, 3, 59.5))) == []
    # another key moves the watermark to the window's end: order 1's window closes silently
    assert s.log(orders((2, 1, 60))) == [(1, 3, 59.5)]


def test_rows_of_one_instant_keep_the_last_in_content_order_whatever_their_arrival() -> None:
    rows = [(1, 7, 5), (1, 3, 5), (1, 5, 5)]
    for _ in range(3):
        random.shuffle(rows)
        s = Stream(TUMBLING)
        assert s.log(orders(*rows, (9, 0, 600))) == [(1, 7, 5.0)]


def test_a_session_merges_rows_less_than_the_gap_apart() -> None:
    s = Stream(SESSION)
    # 0, 20, 45: one session (gaps 20 and 25 < 30); 75 is exactly 30 after 45: a new one
    got = s.log(orders((1, 1, 0), (1, 3, 45), (1, 2, 20), (1, 4, 75), (2, 1, 75)))
    assert got == [(1, 3, 45.0)]  # the first session closed at 45 + 30 = 75
    assert s.log(orders((3, 1, 104))) == []
    assert sorted(s.log(orders((3, 1, 105)))) == [(1, 4, 75.0), (2, 1, 75.0)]


def test_a_row_between_two_sessions_merges_them_into_one() -> None:
    s = Stream(SESSION)
    # 0 and 40 alone are two sessions (40 - 0 >= 30); 20 is less than 30 from both
    assert s.log(orders((1, 2, 40), (1, 1, 0), (1, 3, 20))) == []
    assert s.log(orders((2, 1, 69))) == []  # the session ends at 40 + 30
    assert s.log(orders((2, 1, 70))) == [(1, 2, 40.0)]


def test_a_row_before_the_end_of_an_emitted_session_is_late() -> None:
    s = Stream(SESSION)
    assert s.log(orders((1, 1, 0), (2, 1, 40))) == [(1, 1, 0.0)]
    assert s.log(orders((1, 2, 10))) == []  # would extend the emitted session: dropped
    assert s.log(orders((1, 3, 35), (2, 2, 200))) == [(1, 3, 35.0), (2, 1, 40.0)]


def test_the_result_does_not_depend_on_how_rows_are_batched() -> None:
    rng = random.Random(7)
    rows = [(rng.randrange(3), rng.randrange(4), float(rng.randrange(0, 400))) for _ in range(60)]
    rows.sort(key=lambda r: r[2])  # a stream in event-time order, cut anywhere
    for window in (TUMBLING, SESSION):
        whole = sorted(Stream(window).log(orders(*rows)))
        for cut in (1, 7, 20):
            s = Stream(window)
            parts = [s.log(orders(*rows[i : i + cut])) for i in range(0, len(rows), cut)]
            assert sorted(r for p in parts for r in p) == whole, (window.kind, cut)


def test_an_explicit_watermark_closes_windows_without_rows() -> None:
    """What Spark does at the end of a backfill: close with the history's newest time."""
    s = Stream(SESSION)
    assert s.log(orders((1, 1, 0), (1, 2, 10))) == []
    node = s.ex.p.nodes[1]
    assert isinstance(node, spec.DedupNode)
    wb = WriteBatch()
    mark = int((T0 + pd.Timedelta(seconds=40)).value // 1000)
    rows = s.ex._dedup(node, orders(), "ts", s.state, wb, watermark=mark)
    s.state.apply(wb)
    assert rows["qty"].tolist() == [2] and rows["ts"].tolist() == [T0 + pd.Timedelta(seconds=10)]
    assert s.log(orders((1, 5, 45))) == []  # 45 is past the emitted session's end (40)


def test_without_a_window_exact_repeats_are_dropped_at_once() -> None:
    s = Stream(None)
    assert s.log(orders((1, 1, 0), (1, 2, 0), (1, 1, 5))) == [(1, 1, 0.0), (1, 1, 5.0)]
    assert s.log(orders((1, 3, 5), (1, 1, 6))) == [(1, 1, 6.0)]
    everything = Stream(None, by=())
    assert everything.log(orders((1, 1, 0), (1, 1, 0), (1, 2, 0))) == [(1, 1, 0.0), (1, 2, 0.0)]
