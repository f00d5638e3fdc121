"""``.changelog(delete_column)``: a keyed upsert stream as retractions and inserts."""

from __future__ import annotations

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fennel_dagster.ops import index
from fennel_dagster.ops.pipeline import PipelineExecutor
from fennel_dagster.ops.state import MemoryState
from fennel_dagster.wire import spec

T0 = pd.Timestamp("2026-01-01", tz="UTC")

USER = spec.DatasetSpec(
    "User", 1,
    (spec.FieldSpec("uid", spec.IntType(), key=True), spec.FieldSpec("city", spec.StringType()),
     spec.FieldSpec("ts", spec.TimestampType(), timestamp=True)),
)  # fmt: skip
PIPE = spec.PipelineSpec(
    "log", "UserLog", ("User",),
    (spec.InputNode("n0", "User"), spec.ChangelogNode("n1", "n0", "deleted")), "n1",
)  # fmt: skip


def rows(*items: tuple[int, str, int, bool]) -> pd.DataFrame:
    """(uid, city, minute, deleted)"""
    return pd.DataFrame(
        {"uid": pd.array([r[0] for r in items], dtype="Int64"), "city": [r[1] for r in items],
         "ts": [T0 + pd.Timedelta(minutes=r[2]) for r in items],
         index.DELETED: [r[3] for r in items]}
    )  # fmt: skip


def feed(batches: list[pd.DataFrame], state: MemoryState | None = None) -> list[tuple]:
    ex = PipelineExecutor(PIPE, {"User": USER})
    state = state if state is not None else MemoryState()
    out: list[tuple] = []
    for b in batches:
        res = ex.run("User", b, state)
        state.apply(res.writes)
        assert list(res.rows.columns) == ["uid", "city", "ts", "deleted"]
        assert res.rows["deleted"].dtype == bool
        out += [
            (int(r.uid), r.city, int((r.ts - T0) / pd.Timedelta(minutes=1)), bool(r.deleted))
            for r in res.rows.itertuples()
        ]
    return out


def test_an_update_retracts_the_previous_version_then_inserts() -> None:
    out = feed([rows((1, "Paris", 0, False), (2, "Rome", 1, False)), rows((1, "Lyon", 5, False))])
    assert out == [
        (1, "Paris", 0, False),
        (2, "Rome", 1, False),
        (1, "Paris", 5, True),  # the old values, retracted at the new version's time
        (1, "Lyon", 5, False),
    ]


def test_a_delete_only_retracts_and_a_later_row_reinserts() -> None:
    out = feed(
        [
            rows((1, "Paris", 0, False)),
            rows((1, "", 3, True), (7, "", 3, True)),  # 7 was never there: nothing
            rows((1, "Nice", 9, False)),
        ]
    )
    assert out == [(1, "Paris", 0, False), (1, "Paris", 3, True), (1, "Nice", 9, False)]


def test_rows_within_a_batch_are_taken_in_time_order() -> None:
    out = feed([rows((1, "B", 2, False), (1, "A", 1, False))])
    assert out == [(1, "A", 1, False), (1, "A", 2, True), (1, "B", 2, False)]


def test_late_and_replayed_rows_emit_nothing() -> None:
    state = MemoryState()
    first = feed([rows((1, "Paris", 5, False))], state)
    again = feed([rows((1, "Paris", 5, False)), rows((1, "Old", 1, False))], state)
    assert first == [(1, "Paris", 5, False)] and again == []


def test_no_delete_marker_column_means_upserts_only() -> None:
    df = rows((1, "Paris", 0, False), (1, "Lyon", 1, False)).drop(columns=[index.DELETED])
    assert feed([df]) == [(1, "Paris", 0, False), (1, "Paris", 1, True), (1, "Lyon", 1, False)]


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(
        st.tuples(st.integers(1, 3), st.sampled_from(["a", "b", "c"]), st.integers(0, 20),
                  st.booleans()),
        min_size=1, max_size=25,
    ),
    st.lists(st.integers(1, 24), max_size=4),
)  # fmt: skip
def test_the_stream_does_not_depend_on_batching(items, cuts) -> None:
    items = sorted(items, key=lambda r: r[2])
    bounds = [0, *sorted({c for c in cuts if c < len(items)}), len(items)]
    parts = [rows(*items[a:b]) for a, b in zip(bounds, bounds[1:], strict=False) if a < b]
    ties = {r[2] for r in items if sum(1 for x in items if x[2] == r[2]) > 1}
    out = feed(parts)
    if not ties & {items[b - 1][2] for b in bounds[1:-1]}:  # a cut inside a tie reorders it
        assert out == feed([rows(*items)])
    # replaying the retractions and inserts rebuilds the upsert table's latest state
    live: dict[int, str] = {}
    for uid, city, _, deleted in out:
        if deleted:
            assert live.pop(uid) == city
        else:
            assert uid not in live
            live[uid] = city
