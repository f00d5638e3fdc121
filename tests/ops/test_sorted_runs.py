"""The sorted-run evaluator (a backfill's Distinct, LastK and count(unique)) gives every event
the values the engine's continuous operator gives it, over the same events."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fennel_dagster.ops.aggregate import run_continuous
from fennel_dagster.ops.aggregate.layout import of_columns
from fennel_dagster.ops.aggregate.sorted_runs import SortedRuns, runnable
from fennel_dagster.ops.keys import micros
from fennel_dagster.ops.rows import json_value
from fennel_dagster.ops.state import MemoryState, WriteBatch
from fennel_dagster.wire import spec

T0 = pd.Timestamp("2026-01-01", tz="UTC")
H = 3600


def _windows() -> list[spec.WindowSpec]:
    return [spec.WindowSpec("continuous", duration=H), spec.WindowSpec("forever")]


def _aggs(w: spec.WindowSpec, tag: str) -> list[spec.AggSpec]:
    return [
        spec.AggSpec("distinct", f"names{tag}", w, of="s"),
        spec.AggSpec("distinct", f"names_nn{tag}", w, of="s", dropnull=True),
        spec.AggSpec("distinct", f"vs{tag}", w, of="v"),
        spec.AggSpec("lastk", f"last3{tag}", w, of="s", limit=3, dedup=True),
        spec.AggSpec("lastk", f"last2{tag}", w, of="v", limit=2, dropnull=True),
        spec.AggSpec("lastk", f"last4{tag}", w, of="s", limit=4),
        spec.AggSpec("count", f"uniq{tag}", w, of="s", unique=True),
        spec.AggSpec("count", f"n{tag}", w),
        spec.AggSpec("count", f"nv{tag}", w, of="v", dropnull=True),
        spec.AggSpec("sum", f"total{tag}", w, of="v"),
        spec.AggSpec("sum", f"units{tag}", w, of="q"),
        spec.AggSpec("avg", f"mean{tag}", w, of="v", default=-1.0),
        spec.AggSpec("avg", f"mean_q{tag}", w, of="q"),
        spec.AggSpec("min", f"low{tag}", w, of="v"),
        spec.AggSpec("max", f"high{tag}", w, of="q", default=0),
    ]


NODE = spec.AggregateNode(
    "n1", "n0", ("uid",), tuple(a for i, w in enumerate(_windows()) for a in _aggs(w, str(i)))
)

events_strategy = st.lists(
    st.tuples(
        st.integers(0, 2),  # uid
        st.one_of(st.none(), st.sampled_from(["a", "b", "c", "null", "é"])),  # s
        st.one_of(st.none(), st.sampled_from([0.0, -0.0, 1.0, 2.5, 10.0, 9.0])),  # v
        st.integers(0, 240),  # minute: several 1 h windows, many ties
        st.one_of(st.none(), st.integers(-(2**40), 2**40)),  # q
    ),
    min_size=1,
    max_size=80,
)


def _engine(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """The engine's operator over the events in time order, one batch."""
    wb = WriteBatch()
    out = run_continuous(NODE, "Out.agg", rows, "ts", MemoryState(), wb)
    return out[[a.into for a in NODE.aggs]].to_dict("records")


def _runs(rows: pd.DataFrame, cut: int) -> list[dict[str, Any]]:
    """The evaluator over the same events sorted by (key, time), fed in two calls split at
    a (key, time) boundary near ``cut``."""
    order = sorted(range(len(rows)), key=lambda i: (int(rows["uid"][i]), rows["ts"][i]))
    keys = [int(rows["uid"][i]) for i in order]
    times = [micros(rows["ts"][i]) for i in order]
    cols = {c: [json_value(rows[c][i]) for i in order] for c in of_columns(NODE)}
    while 0 < cut < len(order) and (keys[cut], times[cut]) == (keys[cut - 1], times[cut - 1]):
        cut += 1
    runs = SortedRuns(NODE.aggs, of_columns(NODE), floats={"v"})
    got: dict[str, list[Any]] = {a.into: [] for a in NODE.aggs}
    for lo, hi in ((0, cut), (cut, len(order))):
        part = runs.feed(keys[lo:hi], times[lo:hi], {c: v[lo:hi] for c, v in cols.items()})
        assert all(part.ok)
        for into, values in part.values.items():
            got[into] += values
    back: list[dict[str, Any]] = [{} for _ in order]
    for pos, i in enumerate(order):
        back[i] = {a.into: got[a.into][pos] for a in NODE.aggs}
    return back


@given(evs=events_strategy, cut=st.integers(0, 80))
@settings(max_examples=150, deadline=None)
def test_every_event_gets_the_engines_values(evs: list[tuple[Any, ...]], cut: int) -> None:
    rows = pd.DataFrame(
        {
            "uid": pd.array([e[0] for e in evs], dtype="Int64"),
            "s": pd.array([e[1] for e in evs], dtype=object),
            "v": pd.array([e[2] for e in evs], dtype=object),
            "q": pd.array([e[4] for e in evs], dtype="Int64"),
            "ts": [T0 + pd.Timedelta(minutes=e[3]) for e in evs],
        }
    )
    rows = rows.sort_values("ts", kind="stable").reset_index(drop=True)
    want, got = _engine(rows), _runs(rows, cut)
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        assert _typed(g) == _typed(w), i


def _typed(v: Any) -> Any:
    """``v`` with each scalar's type beside it (1, 1.0 and True differ; 0.0 and -0.0 not)."""
    if isinstance(v, dict):
        return {k: _typed(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_typed(x) for x in v]
    if isinstance(v, float) and v == 0:
        return ("float", 0.0)
    return (type(v).__name__, v)


def test_a_value_leaves_the_window_when_its_last_occurrence_is_older_than_the_duration() -> None:
    w = spec.WindowSpec("continuous", duration=H)
    aggs = [
        spec.AggSpec("distinct", "d", w, of="s"),
        spec.AggSpec("lastk", "k", w, of="s", limit=2, dedup=True),
    ]
    runs = SortedRuns(aggs, ["s"])
    us = 1_000_000
    got = runs.feed(
        [1, 1, 1, 1], [0, 10 * us, H * us, H * us + 11 * us], {"s": ["a", "b", "a", "c"]}
    ).values
    # at 1 h both ends are in: a (0 s, 1 h) and b; at 1 h + 11 s, a (1 h) and c
    assert got["d"] == [["a"], ["a", "b"], ["a", "b"], ["a", "c"]]
    assert got["k"] == [["a"], ["b", "a"], ["a", "b"], ["c", "a"]]


@pytest.mark.parametrize(
    ("agg", "ok"),
    [
        (spec.AggSpec("distinct", "d", spec.WindowSpec("continuous", duration=H), of="s"), True),
        (spec.AggSpec("lastk", "d", spec.WindowSpec("forever"), of="s", limit=1), True),
        (spec.AggSpec("count", "d", spec.WindowSpec("forever"), of="s", unique=True), True),
        (spec.AggSpec("firstk", "d", spec.WindowSpec("forever"), of="s", limit=1), False),
        (
            spec.AggSpec(
                "distinct", "d", spec.WindowSpec("tumbling", duration=H, stride=H), of="s"
            ),
            False,
        ),
        (
            spec.AggSpec(
                "distinct", "d", spec.WindowSpec("continuous", duration=H, lookback=60), of="s"
            ),
            False,
        ),
    ],
)
def test_runnable_takes_continuous_distinct_lastk_and_unique_counts_only(
    agg: spec.AggSpec, ok: bool
) -> None:
    assert runnable(agg) is ok
