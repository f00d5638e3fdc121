"""Windowed aggregation: exact continuous windows, every aggregation kind, closed windows."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fennel_dagster.ops import aggregate
from fennel_dagster.ops.pipeline import PipelineExecutor
from fennel_dagster.ops.state import MemoryState
from fennel_dagster.wire import spec

H = 3600
T0 = pd.Timestamp("2026-01-01", tz="UTC")

TXN = spec.DatasetSpec(
    "Txn", 1,
    (spec.FieldSpec("uid", spec.IntType()), spec.FieldSpec("amount", spec.FloatType()),
     spec.FieldSpec("ts", spec.TimestampType(), timestamp=True)),
)  # fmt: skip


def agg_pipeline(*aggs: spec.AggSpec, emit: str = "eager") -> spec.PipelineSpec:
    return spec.PipelineSpec(
        "agg", "Out", ("Txn",),
        (spec.InputNode("n0", "Txn"), spec.AggregateNode("n1", "n0", ("uid",), aggs, emit)),  # type: ignore[arg-type]
        "n1",
    )  # fmt: skip


def events(rows: list[tuple[int, float, float]]) -> pd.DataFrame:
    return pd.DataFrame(
        {"uid": pd.array([r[0] for r in rows], dtype="Int64"), "amount": [r[1] for r in rows],
         "ts": [T0 + pd.Timedelta(hours=r[2]) for r in rows]}
    )  # fmt: skip


def cont(hours: int) -> spec.WindowSpec:
    return spec.WindowSpec("continuous", duration=hours * H)


def run(
    p: spec.PipelineSpec, batches: list[pd.DataFrame]
) -> tuple[MemoryState, list[pd.DataFrame]]:
    ex = PipelineExecutor(p, {"Txn": TXN})
    state = MemoryState()
    outs = []
    for b in batches:
        res = ex.run("Txn", b, state)
        state.apply(res.writes)
        outs.append(res.rows)
    return state, outs


def lookup(state: MemoryState, p: spec.PipelineSpec, uid: int, hours: float) -> dict:
    node = p.nodes[-1]
    assert isinstance(node, spec.AggregateNode)
    df, found, _ = aggregate.lookup_aggregate(
        state,
        "Out.agg",
        node,
        pd.DataFrame({"uid": [uid]}),
        pd.Series([T0 + pd.Timedelta(hours=hours)]),
    )
    return {**df.iloc[0].to_dict(), "found": bool(found.iloc[0])}


def test_continuous_window_is_exact_at_its_boundary() -> None:
    p = agg_pipeline(
        spec.AggSpec("sum", "s", cont(2), of="amount"), spec.AggSpec("count", "n", cont(2))
    )
    state, _ = run(p, [events([(1, 10.0, 0), (1, 5.0, 1), (1, 1.0, 2)])])
    assert lookup(state, p, 1, 2) == {
        "s": 16.0,
        "n": 3,
        "found": True,
    }  # [0h, 2h]: both ends included, as in Fennel
    assert lookup(state, p, 1, 2.001) == {"s": 6.0, "n": 2, "found": True}  # the 0h one left
    assert lookup(state, p, 1, 1.999) == {"s": 15.0, "n": 2, "found": True}
    assert lookup(state, p, 1, 4) == {"s": 1.0, "n": 1, "found": True}  # 2h: at the edge
    assert lookup(state, p, 1, 4.001) == {"s": 0, "n": 0, "found": True}  # expired, key known
    assert lookup(state, p, 2, 4)["found"] is False


def test_identical_events_all_count_whatever_the_batching() -> None:
    p = agg_pipeline(spec.AggSpec("count", "n", cont(24)))
    same = (1, 5.0, 1.0)
    together, _ = run(p, [events([same, same, same])])
    apart, _ = run(p, [events([same]), events([same, same])])
    assert lookup(together, p, 1, 2)["n"] == lookup(apart, p, 1, 2)["n"] == 3


def test_eager_emission_gives_each_event_its_value_as_of_its_time() -> None:
    p = agg_pipeline(spec.AggSpec("sum", "s", cont(24), of="amount"))
    _, (out,) = run(p, [events([(1, 1.0, 0), (1, 2.0, 1), (2, 7.0, 1), (1, 4.0, 30)])])
    assert out[["uid", "s"]].values.tolist() == [[1, 1.0], [1, 3.0], [2, 7.0], [1, 4.0]]


@pytest.mark.parametrize(
    ("agg", "expected"),
    [
        (spec.AggSpec("avg", "x", cont(24), of="amount", default=0.0), 2.25),
        (spec.AggSpec("min", "x", cont(24), of="amount"), 1.0),
        (spec.AggSpec("max", "x", cont(24), of="amount"), 4.0),
        (
            spec.AggSpec("stddev", "x", cont(24), of="amount", default=0.0),
            pytest.approx(1.0897247358),
        ),
        (spec.AggSpec("quantile", "x", cont(24), of="amount", p=0.5), 2.0),
        (spec.AggSpec("count", "x", cont(24), of="amount", unique=True), 3),
        (spec.AggSpec("lastk", "x", cont(24), of="amount", limit=3, dedup=True), [4.0, 2.0, 1.0]),
        (spec.AggSpec("firstk", "x", cont(24), of="amount", limit=2, dedup=False), [1.0, 2.0]),
        (spec.AggSpec("distinct", "x", cont(24), of="amount"), [1.0, 2.0, 4.0]),
        (spec.AggSpec("sum", "x", spec.WindowSpec("forever"), of="amount"), 9.0),
    ],
)
def test_every_aggregation_kind(agg: spec.AggSpec, expected: object) -> None:
    p = agg_pipeline(agg)
    state, _ = run(p, [events([(1, 1.0, 0), (1, 2.0, 1), (1, 2.0, 2), (1, 4.0, 3)])])
    assert lookup(state, p, 1, 5)["x"] == expected


def test_tumbling_windows_emit_once_closed_with_the_window_end_as_time() -> None:
    w = spec.WindowSpec("tumbling", duration=H, stride=H)
    p = agg_pipeline(spec.AggSpec("count", "n", w), emit="final")
    _, outs = run(
        p,
        [events([(1, 1.0, 0.1), (1, 1.0, 0.5)]), events([(1, 1.0, 1.2)]), events([(1, 1.0, 2.5)])],
    )
    assert [len(o) for o in outs] == [0, 1, 1]
    assert outs[1].iloc[0]["n"] == 2
    assert outs[1].iloc[0]["ts"] == T0 + pd.Timedelta(hours=1) - pd.Timedelta(microseconds=1)


batches = st.lists(
    st.tuples(st.integers(1, 3), st.floats(0, 100, allow_nan=False).map(lambda x: round(x, 2)), st.integers(0, 100).map(lambda m: m / 10)),
    min_size=1, max_size=30,
)  # fmt: skip


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(batches, st.randoms(use_true_random=False), st.integers(1, 6))
def test_same_events_in_any_batching_and_order_give_the_same_state(rows, rnd, pieces) -> None:
    p = agg_pipeline(
        spec.AggSpec("sum", "s", cont(3), of="amount"), spec.AggSpec("count", "n", spec.WindowSpec("forever")),
        spec.AggSpec("lastk", "k", cont(3), of="amount", limit=2, dedup=False),
    )  # fmt: skip
    one, _ = run(p, [events(rows)])
    shuffled = rows[:]
    rnd.shuffle(shuffled)
    size = max(1, len(shuffled) // pieces)
    many, _ = run(p, [events(shuffled[i : i + size]) for i in range(0, len(shuffled), size)])
    assert list(one.scan("agg:Out.agg:n1", b"")) == list(many.scan("agg:Out.agg:n1", b""))
    for uid in (1, 2, 3):
        for hours in (0, 2.5, 5, 11):
            assert lookup(one, p, uid, hours) == lookup(many, p, uid, hours)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), min_size=1, max_size=20),
    st.sampled_from(["int64", "Int64"]),
)
def test_key_tuples_of_int_columns_equal_the_json_road(
    values: list[int | None], dtype: str
) -> None:
    """The int road of ``key_tuples`` gives the very tuples (and Python types) of the
    ``json_value`` road: state keys must not depend on which road a batch took."""
    from fennel_dagster.ops.aggregate.events import key_tuples
    from fennel_dagster.ops.rows import json_value

    if dtype == "int64":
        values = [v if v is not None else 0 for v in values]
    df = pd.DataFrame({"k": pd.array(values, dtype=dtype), "j": pd.array(values, dtype=dtype)})
    want = [tuple(json_value(v) for v in row) for row in df.astype(object).to_numpy().tolist()]
    got = key_tuples(df, ["k", "j"])
    assert got == want
    assert [tuple(map(type, t)) for t in got] == [tuple(map(type, t)) for t in want]
