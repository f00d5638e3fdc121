"""Stateless and stateful operators on batches: joins as of event time, dedup, first/latest."""

from __future__ import annotations

import pandas as pd

from fennel_dagster.ops import index
from fennel_dagster.ops.pipeline import PipelineExecutor
from fennel_dagster.ops.state import MemoryState, WriteBatch
from fennel_dagster.wire import spec
from fennel_dagster.wire.usercode import capture

T0 = pd.Timestamp("2026-01-01", tz="UTC")
TS = spec.FieldSpec("ts", spec.TimestampType(), timestamp=True)
CLICK = spec.DatasetSpec("Click", 1, (spec.FieldSpec("uid", spec.IntType()), spec.FieldSpec("page", spec.StringType()),
                                       spec.FieldSpec("tags", spec.ListType(spec.StringType())), TS))  # fmt: skip
USER = spec.DatasetSpec(
    "User",
    1,
    (
        spec.FieldSpec("uid", spec.IntType(), key=True),
        spec.FieldSpec("tier", spec.StringType()),
        TS,
    ),
)
DATASETS = {"Click": CLICK, "User": USER}


def clicks(rows: list[tuple[int, str, float]]) -> pd.DataFrame:
    return pd.DataFrame({"uid": pd.array([r[0] for r in rows], dtype="Int64"), "page": [r[1] for r in rows],
                         "tags": [["a", "b"] for _ in rows], "ts": [T0 + pd.Timedelta(hours=r[2]) for r in rows]})  # fmt: skip


def pipeline(*nodes: spec.Node, inputs: tuple[str, ...] = ("Click",)) -> spec.PipelineSpec:
    heads = tuple(spec.InputNode(f"i{k}", name) for k, name in enumerate(inputs))
    return spec.PipelineSpec("p", "Out", inputs, heads + nodes, nodes[-1].id)


def run(
    p: spec.PipelineSpec, df: pd.DataFrame, state: MemoryState | None = None, name: str = "Click"
):
    state = state or MemoryState()
    res = PipelineExecutor(p, DATASETS).run(name, df, state)
    state.apply(res.writes)
    return res


def test_join_reads_the_right_side_as_of_each_left_rows_time() -> None:
    state = MemoryState()
    wb = WriteBatch()
    users = pd.DataFrame({"uid": pd.array([1, 1], dtype="Int64"), "tier": ["free", "gold"],
                          "ts": [T0, T0 + pd.Timedelta(hours=5)]})  # fmt: skip
    index.upsert(USER, users, wb)
    state.apply(wb)
    p = pipeline(spec.JoinNode("j", "i0", "User", "left", ("uid",), ("uid",)))
    out = run(p, clicks([(1, "x", 1), (1, "y", 6), (2, "z", 6)]), state).rows
    assert out["tier"].tolist() == ["free", "gold", None]
    inner = pipeline(
        spec.JoinNode("j", "i0", "User", "inner", ("uid",), ("uid",), within_before=3600)
    )
    assert run(inner, clicks([(1, "x", 1.5), (1, "y", 5.5), (1, "w", 3)]), state).rows[
        "page"
    ].tolist() == ["y"]


def test_join_within_after_reads_versions_up_to_after_later() -> None:
    """within=(1h, 2h): the version as of t + 2h (inclusive), none if older than t - 1h
    (inclusive); the row keeps its own time."""
    state = MemoryState()
    wb = WriteBatch()
    users = pd.DataFrame({"uid": pd.array([1, 1], dtype="Int64"), "tier": ["free", "gold"],
                          "ts": [T0, T0 + pd.Timedelta(hours=5)]})  # fmt: skip
    index.upsert(USER, users, wb)
    state.apply(wb)
    node = spec.JoinNode("j", "i0", "User", "left", ("uid",), ("uid",), 3600, 7200)
    out = run(pipeline(node), clicks([(1, "a", 1), (1, "b", 4), (1, "c", 3), (1, "d", 2.5)]),
              state).rows  # fmt: skip
    assert out["tier"].tolist() == ["free", "gold", "gold", None]
    assert out["ts"].tolist() == [T0 + pd.Timedelta(hours=h) for h in (1, 4, 3, 2.5)]


def test_dedup_drops_repeats_across_batches() -> None:
    p = pipeline(spec.DedupNode("d", "i0", ("uid", "page")))
    state = MemoryState()
    first = run(p, clicks([(1, "x", 1), (1, "x", 1), (1, "y", 1)]), state).rows
    second = run(p, clicks([(1, "x", 1), (2, "x", 1)]), state).rows
    assert first["page"].tolist() == ["x", "y"] and second["uid"].tolist() == [2]


def test_first_and_latest_keep_the_earliest_or_newest_per_key() -> None:
    state = MemoryState()
    latest = pipeline(spec.LatestNode("l", "i0", ("uid",)))
    assert run(latest, clicks([(1, "b", 2), (1, "a", 1)]), state).rows["page"].tolist() == [
        "a",
        "b",
    ]
    assert run(latest, clicks([(1, "old", 1.5)]), state).rows.empty  # older than what we have
    first = pipeline(spec.FirstNode("f", "i0", ("uid",)))
    assert run(first, clicks([(1, "b", 2), (1, "a", 1)])).rows["page"].tolist() == ["a"]


def test_explode_select_rename_drop_and_union() -> None:
    p = pipeline(
        spec.ExplodeNode("e", "i0", ("tags",)), spec.RenameNode("r", "e", (("page", "url"),)),
        spec.DropNode("d", "r", ("tags",)), spec.UnionNode("u", ("d", "d")), spec.SelectNode("s", "u", ("url",)),
    )  # fmt: skip
    out = run(p, clicks([(1, "x", 1)])).rows
    assert list(out.columns) == ["url", "ts"] and out["url"].tolist() == ["x"] * 4


def test_a_raising_user_function_reports_its_rows_and_keeps_the_good_ones() -> None:
    def strict(df: pd.DataFrame) -> pd.Series:
        if (df["page"] == "boom").any():
            raise ValueError("no boom pages")
        return df["uid"] > 0

    p = pipeline(spec.FilterNode("f", "i0", code=capture(strict)))
    res = run(p, clicks([(1, "ok", 1), (2, "boom", 1), (3, "fine", 1)]))
    assert res.rows["page"].tolist() == ["ok", "fine"]
    (err,) = res.errors
    assert (err.dataset, err.operator, err.reason) == (
        "Out",
        "Out.p (filter f)",
        "ValueError: no boom pages",
    )
    assert err.row["page"] == "boom"
