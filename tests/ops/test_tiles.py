"""Tiled continuous aggregation equals the definition, computed naively from the raw events.

The value at ``t`` aggregates exactly the key's events with time in ``[t - duration, t]``
(``forever``: all up to ``t``), whatever the arrival order and batching. Float sums, means and
standard deviations are compared with a tolerance (their rounding depends on summation order);
everything else, integer sums included, exactly.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fennel_dagster.ops import aggregate, tiles
from fennel_dagster.ops.aggregate.events import event_seq
from fennel_dagster.ops.pipeline import PipelineExecutor
from fennel_dagster.ops.state import MemoryState, scan_each
from fennel_dagster.wire import spec

T0 = pd.Timestamp("2026-01-01", tz="UTC")
US = 1_000_000
DAY = 86_400

EV = spec.DatasetSpec(
    "Ev", 1,
    (spec.FieldSpec("uid", spec.IntType()),
     spec.FieldSpec("amount", spec.OptionalType(spec.FloatType())),
     spec.FieldSpec("qty", spec.IntType()),
     spec.FieldSpec("ts", spec.TimestampType(), timestamp=True)),
)  # fmt: skip


def window(duration: int | None) -> spec.WindowSpec:
    if duration is None:
        return spec.WindowSpec("forever")
    return spec.WindowSpec("continuous", duration=duration)


def every_kind(w: spec.WindowSpec) -> tuple[spec.AggSpec, ...]:
    A = spec.AggSpec  # noqa: N806
    return (
        A("count", "n", w), A("count", "n_amount", w, of="amount", dropnull=True),
        A("count", "n_rows", w, of="amount"),
        A("sum", "s_amount", w, of="amount"), A("sum", "s_qty", w, of="qty"),
        A("avg", "avg_amount", w, of="amount", default=-1.0),
        A("avg", "avg_qty", w, of="qty", default=-1.0),
        A("min", "min_amount", w, of="amount", default=-1.0),
        A("max", "max_amount", w, of="amount", default=-1.0),
        A("min", "min_qty", w, of="qty", default=-1), A("max", "max_qty", w, of="qty", default=-1),
        A("stddev", "sd_amount", w, of="amount", default=-1.0),
        A("stddev", "sd_qty", w, of="qty", default=-1.0),
        A("quantile", "p50", w, of="amount", p=0.5, default=-1.0),
        A("distinct", "qtys", w, of="qty"), A("count", "u_qty", w, of="qty", unique=True),
        A("lastk", "last3", w, of="qty", limit=3), A("firstk", "first2", w, of="qty", limit=2),
    )  # fmt: skip


def pipeline(aggs: tuple[spec.AggSpec, ...]) -> spec.PipelineSpec:
    return spec.PipelineSpec(
        "agg", "Out", ("Ev",),
        (spec.InputNode("n0", "Ev"), spec.AggregateNode("n1", "n0", ("uid",), aggs)),
        "n1",
    )  # fmt: skip


Event = tuple[int, float | None, int, int]  # uid, amount, qty, time (microseconds after T0)


def frame(rows: list[Event]) -> pd.DataFrame:
    return pd.DataFrame(
        {"uid": pd.array([r[0] for r in rows], dtype="Int64"),
         "amount": pd.array([r[1] for r in rows], dtype="Float64"),
         "qty": pd.array([r[2] for r in rows], dtype="Int64"),
         "ts": [T0 + pd.Timedelta(microseconds=r[3]) for r in rows]}
    )  # fmt: skip


# --------------------------------------------------------------------------- the definition


def _tag(v: Any) -> str:
    return json.dumps(v, sort_keys=True)


def reference(agg: spec.AggSpec, events: list[Event], uid: int, t: int) -> Any:
    """``agg`` of ``uid`` at ``t`` straight from the definition (ties: storage order)."""
    d = agg.window.duration
    inside = [e for e in events if e[0] == uid and e[3] <= t and (d is None or e[3] >= t - d * US)]
    inside.sort(key=lambda e: (e[3], event_seq({"amount": e[1], "qty": e[2]}, [uid])))
    col = {"amount": 1, "qty": 2}.get(agg.of or "")
    vals = [1 if col is None else e[col] for e in inside]
    present = [v for v in vals if v is not None]
    match agg.kind:
        case "count" if agg.unique:
            return len({_tag(v) for v in present})
        case "count":
            return len(present) if agg.dropnull else len(vals)
        case "sum":
            return sum(present) if present else 0
        case "avg":
            return sum(present) / len(present) if present else agg.default
        case "min":
            return min(present) if present else agg.default
        case "max":
            return max(present) if present else agg.default
        case "stddev":
            if not present:
                return agg.default
            mean = sum(present) / len(present)
            return math.sqrt(sum((v - mean) ** 2 for v in present) / len(present))
        case "quantile":
            ranked = sorted(present)
            # Fennel's rank: floor(p * n), the last element at most
            if not ranked:
                return -1.0
            return ranked[min(len(ranked) - 1, math.floor((agg.p or 0) * len(ranked)))]
        case "distinct":
            return sorted({_tag(v): v for v in present}.values(), key=_tag)
        case "lastk":
            return present[::-1][: agg.limit]
        case "firstk":
            return present[: agg.limit]
    raise AssertionError(agg.kind)


def same(agg: spec.AggSpec, got: Any, want: Any) -> bool:
    if agg.kind in ("avg", "stddev") or (agg.kind == "sum" and agg.of == "amount"):
        return got == pytest.approx(want, rel=1e-9, abs=1e-6)
    if agg.kind in ("sum", "count", "min", "max") and agg.of != "amount":
        assert type(got) is type(want), (agg.into, got, want)
    return bool(got == want)


# --------------------------------------------------------------------------- strategies

amounts = st.one_of(
    st.none(), st.integers(-10_000, 10_000).map(lambda c: c / 100), st.floats(-1e6, 1e6)
)
quantities = st.one_of(st.integers(-5, 5), st.integers(-(2**60), 2**60))
_EDGES = sorted(
    {k * s * US + e for s in (1, 50, 64, 2048, 3600, 12_000, 7 * DAY) for k in (0, 1, 2, 3)
     for e in (-1, 0, 1) if k * s * US + e >= 0}
)  # fmt: skip
times = st.one_of(
    st.sampled_from(_EDGES),  # window lengths and tile sizes apart, and a microsecond off
    st.integers(0, 3 * 3600 * US),  # dense: hours, to the microsecond
    st.integers(0, 40 * DAY).map(lambda s: s * US),  # sparse: weeks, several forever levels
)
events_st = st.lists(
    st.tuples(st.integers(1, 3), amounts, quantities, times), min_size=1, max_size=40
)
durations = st.sampled_from([None, 1, 50, 3600, 7 * DAY, 12_000])


def with_duplicates(rows: list[Event], picks: list[int]) -> list[Event]:
    return rows + [rows[i % len(rows)] for i in picks]


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    events_st,
    st.lists(st.integers(0, 100), max_size=5),
    durations,
    st.randoms(use_true_random=False),
    st.integers(1, 5),
    st.lists(st.one_of(times, st.integers(-DAY * US, 0), st.integers(0, 400 * DAY * US)), max_size=8),
)  # fmt: skip
def test_tiled_equals_definition(rows, dups, duration, rnd, pieces, probes) -> None:
    rows = with_duplicates(rows, dups)
    rnd.shuffle(rows)
    aggs = every_kind(window(duration))
    p = pipeline(aggs)
    ex = PipelineExecutor(p, {"Ev": EV})
    state = MemoryState()
    size = max(1, len(rows) // pieces)
    seen: list[Event] = []
    for i in range(0, len(rows), size):
        batch = rows[i : i + size]
        res = ex.run("Ev", frame(batch), state)
        state.apply(res.writes)
        seen += batch
        assert len(res.rows) == len(batch)
        for (uid, _, _, t), (_, out) in zip(batch, res.rows.iterrows(), strict=True):
            for a in aggs:
                want = reference(a, seen, uid, t)
                assert same(a, out[a.into], want), (a.into, t, out[a.into], want)
    node = p.nodes[-1]
    assert isinstance(node, spec.AggregateNode)
    queries = [(u, t) for u in (1, 2, 3, 4) for t in [*probes, *(r[3] for r in rows[:3])]]
    df, found, _ = aggregate.lookup_aggregate(
        state, "Out.agg", node,
        pd.DataFrame({"uid": [u for u, _ in queries]}),
        pd.Series([T0 + pd.Timedelta(microseconds=t) for _, t in queries]),
    )  # fmt: skip
    got = {a.into: df[a.into].tolist() for a in aggs}  # plain Python values, as emitted
    for i, (uid, t) in enumerate(queries):
        assert found.iloc[i] == any(r[0] == uid and r[3] <= t for r in rows)
        for a in aggs:
            want = reference(a, rows, uid, t)
            assert same(a, got[a.into][i], want), (a.into, uid, t, got[a.into][i], want)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(events_st, st.randoms(use_true_random=False), durations)
def test_tiles_do_not_depend_on_order_or_batching(rows, rnd, duration) -> None:
    p = pipeline(every_kind(window(duration))[:13])

    def run(parts: list[list[Event]]) -> MemoryState:
        ex = PipelineExecutor(p, {"Ev": EV})
        state = MemoryState()
        for part in parts:
            state.apply(ex.run("Ev", frame(part), state).writes)
        return state

    shuffled = rows[:]
    rnd.shuffle(shuffled)
    one, many = run([rows]), run([[r] for r in shuffled])
    for ns in ("agg:Out.agg:n1", "agg:Out.agg:n1:tiles"):
        assert list(one.scan(ns, b"")) == list(many.scan(ns, b""))


# --------------------------------------------------------------------------- plans


@given(
    st.integers(-(10**12), 10**13), st.integers(0, 10**11), st.sampled_from([1, 64, 3600, 86400])
)
def test_plan_covers_the_range_exactly_once(lo: int, width: int, tile_s: int) -> None:
    for sizes in ((tile_s * US,), tiles.FOREVER_LEVELS):
        hi = lo + width
        p = tiles.plan(sizes, np.array([lo]), np.array([hi]))
        spans = [(int(p.la[0]), int(p.lb[0])), (int(p.ra[0]), int(p.rb[0]))]
        for t, l0, l1, r0, r1 in p.tiles:
            spans += [(int(l0[0]) * t, int(l1[0]) * t), (int(r0[0]) * t, int(r1[0]) * t)]
        spans = sorted(s for s in spans if s[0] < s[1])
        assert spans[0][0] == lo and spans[-1][1] == hi + 1
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
        finest = sizes[-1]
        for a, b in spans[:1] + spans[-1:]:
            if (a, b) in ((int(p.la[0]), int(p.lb[0])), (int(p.ra[0]), int(p.rb[0]))):
                assert b - a <= 2 * finest


# --------------------------------------------------------------------------- bounded reads


class Counting:
    """A ``StateReader`` that counts the entries it hands out."""

    def __init__(self, base: MemoryState) -> None:
        self.base, self.entries = base, 0

    def get(self, namespace: str, key: bytes) -> bytes | None:
        self.entries += 1
        return self.base.get(namespace, key)

    def multi_get(self, namespace: str, keys: list[bytes]) -> list[bytes | None]:
        self.entries += len(keys)
        return self.base.multi_get(namespace, keys)

    def scan(
        self, namespace: str, start: bytes, end: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        for item in self.base.scan(namespace, start, end):
            self.entries += 1
            yield item

    def last(self, namespace: str, start: bytes, end: bytes) -> tuple[bytes, bytes] | None:
        self.entries += 1
        return self.base.last(namespace, start, end)

    def scan_ranges(
        self, namespace: str, bounds: Sequence[tuple[bytes, bytes]]
    ) -> tuple[list[tuple[bytes, bytes]], list[int]]:
        return scan_each(self, namespace, bounds)


def reads_for_lookup(duration: int | None, history_minutes: int) -> int:
    A = spec.AggSpec  # noqa: N806
    w = window(duration)
    aggs = (A("count", "n", w), A("sum", "s", w, of="amount"), A("min", "lo", w, of="amount"),
            A("avg", "m", w, of="amount", default=0.0), A("stddev", "sd", w, of="qty"))  # fmt: skip
    p = pipeline(aggs)
    ex = PipelineExecutor(p, {"Ev": EV})
    state = MemoryState()
    rows = [(1, float(i % 7), i, i * 60 * US) for i in range(history_minutes)]
    for i in range(0, len(rows), 5000):
        state.apply(ex.run("Ev", frame(rows[i : i + 5000]), state).writes)
    node = p.nodes[-1]
    assert isinstance(node, spec.AggregateNode)
    counting = Counting(state)
    t = T0 + pd.Timedelta(minutes=history_minutes - 0.5)
    df, found, _ = aggregate.lookup_aggregate(
        counting, "Out.agg", node, pd.DataFrame({"uid": [1]}), pd.Series([t])
    )
    assert bool(found.iloc[0])
    expect = history_minutes if duration is None else min(history_minutes, duration // 60)
    assert df["n"].iloc[0] == expect
    return counting.entries


@pytest.mark.parametrize("duration", [3600, 7 * DAY, None])
def test_a_lookup_reads_a_bounded_number_of_entries(duration: int | None) -> None:
    short, long = reads_for_lookup(duration, 600), reads_for_lookup(duration, 20_000)
    sizes = tiles.levels("forever" if duration is None else "continuous", duration)
    # whole tiles: <= 64 of the coarsest level if bounded, <= 2 x 31 of each finer one
    # (forever: <= 31 per level, one side only); raw events (1/min) in two finest edge tiles;
    # one entry for ``found``
    whole = (len(sizes) * 31 + 2) if duration is None else 64 + 62 * (len(sizes) - 1)
    bound = whole + 2 * (sizes[-1] // US // 60 + 1) + 1
    assert short <= bound and long <= bound, (short, long, bound)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(-50, 50), st.integers(-3, 20)), max_size=40),
    st.sampled_from([1, 10**6, 10**16, 10**17]),  # 10**17: past the unranked path's range
    st.none() | st.lists(st.integers(0, 12), min_size=4, max_size=4),
)
def test_merge_grouped_is_a_sorted_merge_per_group(
    rows: list[tuple[int, int, int]], scale: int, slack: list[int] | None
) -> None:
    """Every group's union at once equals one merge per group (touching intervals merge,
    empty ones vanish; with a group's slack, so do intervals at most that far apart), at any
    magnitude: where group offsets could overflow, the running maximum works on ranks."""
    g = np.array([r[0] for r in rows], dtype=np.int64)
    a = np.array([r[1] for r in rows], dtype=np.int64) * scale
    b = a + np.array([r[2] for r in rows], dtype=np.int64) * scale
    gaps = None if slack is None else np.array(slack, dtype=np.int64) * scale
    got = list(zip(*(x.tolist() for x in tiles.merge_grouped(g, a, b, gaps)), strict=True))
    want = [(k, x, y) for k in range(4)
            for x, y in merge_sorted(a[g == k], b[g == k], 0 if gaps is None else int(gaps[k]))]  # fmt: skip
    assert got == want


def merge_sorted(a: np.ndarray, b: np.ndarray, slack: int = 0) -> list[tuple[int, int]]:
    """The oracle: the union of ``[a[i], b[i])`` by one pass over the sorted intervals,
    joining those at most ``slack`` apart."""
    out: list[tuple[int, int]] = []
    for x, y in sorted(zip(a.tolist(), b.tolist(), strict=True)):
        if x >= y:
            continue
        if out and x <= out[-1][1] + slack:
            out[-1] = (out[-1][0], max(y, out[-1][1]))
        else:
            out.append((x, y))
    return out
