"""The source job's two roads give the same iteration (engine.jobs.source_columns): a batch
judged column by column equals the same batch judged row by row, on generated batches that
mix good rows, late and future rows, rows of the wrong types and broken JSON."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fennel_dagster import commit_spec, dataset, field, meta, source
from fennel_dagster.commit.compiler import compile_blueprints, jobs_of
from fennel_dagster.commit.graph import EntityGraph
from fennel_dagster.engine.jobs.source import SourceJob
from fennel_dagster.engine.messages import InMessage, Iteration
from fennel_dagster.ops.batches import rows_of
from fennel_dagster.ops.state import MemoryState, WriteBatch
from fennel_dagster.sources import Kafka
from fennel_dagster.wire import plan

T0 = pd.Timestamp("2026-01-01", tz="UTC")


def _job(keyed: bool, since: datetime | None = None) -> SourceJob:
    @meta(owner="t@example.com")
    @source(Kafka(name="k").topic("ext"), disorder="1m", cdc="upsert" if keyed else "append",
            since=since, max_future="1d")  # fmt: skip
    @dataset(index=keyed)
    class Ev:
        uid: int = field(key=keyed)  # type: ignore[assignment]
        amount: float
        ok: bool | None
        name: str | None
        ts: datetime
        seen: datetime | None

    jobs = jobs_of(compile_blueprints(EntityGraph.build(commit_spec("t", [Ev], []))))
    spec = next(j for j in jobs if isinstance(j, plan.SourceJobSpec))
    return SourceJob(spec, 2)


def _iso(secs: float, tz: str, zulu: bool) -> str:
    """ISO-8601 text of ``T0 + secs`` in ``tz`` (``Z`` for UTC when ``zulu``)."""
    text = (T0 + pd.Timedelta(seconds=secs)).tz_convert(tz).isoformat()
    return text.replace("+00:00", "Z") if zulu else text


# times on a coarse grid, so rows meet the watermark's, since's and max_future's edges exactly,
# and some a half second off them
_secs = st.one_of(
    st.integers(-20, 20).map(lambda k: 30 * k),
    st.integers(-20, 20).map(lambda k: 30 * k + 0.5),
    st.sampled_from([3599.5, 3600, 3600.5, 2 * 86400, 2 * 86400 + 0.5, 2 * 86400 + 1]),
    st.integers(-600, 3 * 86400),
)
_good = st.fixed_dictionaries({
    "uid": st.integers(-5, 5),
    "amount": st.floats(-1e6, 1e6) | st.integers(-10, 10),
    "ok": st.none() | st.booleans(),
    "name": st.none() | st.text(max_size=4),
    "ts": st.builds(_iso, _secs, st.sampled_from(["UTC", "Asia/Kolkata", "America/St_Johns"]),
                    st.booleans()),
    "seen": st.none() | _secs.map(lambda s: (T0 + pd.Timedelta(seconds=s)).strftime(
        "%Y-%m-%d %H:%M:%S")),
})  # fmt: skip
# values the column road must leave to the row road (or must judge exactly like it)
_odd = st.sampled_from([
    ("uid", 3.0), ("uid", True), ("uid", 2**64), ("uid", "7"), ("uid", None),
    ("amount", float("nan")), ("amount", None), ("amount", True), ("ok", 1),
    ("name", 5), ("ts", "yesterday"), ("ts", ""), ("ts", 1767225600), ("ts", "2300-01-01"),
    ("ts", "2026-01-05T00:00:00+00:00"), ("seen", "2026-01-01T00:00:00.000000001Z"),
    ("extra", [1, 2]),
])  # fmt: skip


@st.composite
def _batch(draw: Any) -> list[InMessage]:
    rows = draw(st.lists(_good, min_size=1, max_size=12))
    values: list[bytes | None] = [json.dumps(r).encode() for r in rows]
    for _ in range(draw(st.integers(0, 2))):
        i = draw(st.integers(0, len(rows) - 1))
        kind = draw(st.integers(0, 3))
        if kind == 0:
            name, v = draw(_odd)
            values[i] = json.dumps({**rows[i], name: v}).encode()
        elif kind == 1:
            values[i] = json.dumps({k: v for k, v in rows[i].items() if k != "amount"}).encode()
        elif kind == 2:  # broken JSON
            values[i] = b"{not json"
        else:
            values[i] = json.dumps([rows[i]]).encode()
    arrived = int((T0 + pd.Timedelta(days=1)).value // 1_000_000)
    return [InMessage("ext", 0, i, None, v, draw(st.sampled_from([0, arrived])))
            for i, v in enumerate(values)]  # fmt: skip


def _both(job: SourceJob, msgs: list[InMessage], mark: int | None) -> tuple[Iteration, Iteration]:
    state = MemoryState()
    if mark is not None:
        state.apply(WriteBatch.of({(job.namespace, b"watermark"): str(mark).encode()}))
    fast = job._by_columns(msgs, state, None) or job._row_by_row(msgs, state, None)  # noqa: SLF001
    return fast, job._row_by_row(msgs, state, None)  # noqa: SLF001


def _same(a: Iteration, b: Iteration) -> None:
    rows_a = [(o.topic, o.partition, r) for o in a.outputs for r in rows_of(o.value)]
    rows_b = [(o.topic, o.partition, r) for o in b.outputs for r in rows_of(o.value)]
    assert rows_a == rows_b
    assert a.errors == b.errors
    assert a.late == b.late
    assert a.writes == b.writes
    assert a.newest_event_us == b.newest_event_us


@settings(max_examples=300, deadline=None)
@given(_batch(), st.booleans(), st.none() | _secs)
def test_the_column_road_equals_the_row_road(
    msgs: list[InMessage], keyed: bool, mark_s: int | None
) -> None:
    job = _job(keyed)
    mark = None if mark_s is None else int((T0 + pd.Timedelta(seconds=mark_s)).value // 1000)
    fast, slow = _both(job, msgs, mark)
    _same(fast, slow)


_ODD = [("uid", 3.0), ("uid", True), ("uid", 2**64), ("uid", 2**63), ("uid", "7"), ("uid", None),
        ("amount", float("nan")), ("amount", None), ("amount", True), ("amount", 2**1100),
        ("ok", 1), ("ok", "true"), ("name", 5), ("name", "x" * 300_000), ("ts", "yesterday"),
        ("ts", ""), ("ts", 1767225600), ("ts", 1767225600000), ("ts", 1767225600 * 10**9),
        ("ts", "2300-01-01"), ("ts", None),
        ("seen", "2026-01-01T00:00:00.000000001Z"), ("seen", "NaT"), ("extra", [1, 2]),
        # texts Arrow's parser refuses or takes, around pandas' own
        ("ts", "2026-01-01T00:00:01.+00:00"), ("ts", "2026-1-1T00:00:01Z"),
        ("ts", "2026-01-01T00:00:01+00"), ("ts", "2026-01-01 00:00:01Z"), ("ts", "2026-01-01T00Z"),
        ("ts", "2026-01-01T00:00:60Z"), ("ts", "2262-04-12T00:00:00Z"),
        ("ts", "2026-01-01T00:00:01.5-05:30"), ("ts", "2026-01-01T00:00:01+0200"),
        ("ts", "2026-01-01T00:00:01.1234567891+00:00"), ("ts", "2026-01-01t00:00:01z")]  # fmt: skip


@pytest.mark.parametrize(("name", "value"), _ODD, ids=[f"{n}={v!r:.20}" for n, v in _ODD])
def test_each_odd_value_is_judged_as_the_row_road_judges_it(name: str, value: Any) -> None:
    rows = [{"uid": i, "amount": 1.5, "ok": None, "name": "a",
             "ts": (T0 + pd.Timedelta(seconds=i)).isoformat(), "seen": None} for i in range(4)]  # fmt: skip
    rows[2] = {**rows[2], name: value}
    msgs = [InMessage("ext", 0, i, None, json.dumps(r).encode()) for i, r in enumerate(rows)]
    for keyed in (False, True):
        fast, slow = _both(_job(keyed), msgs, None)
        _same(fast, slow)


@settings(max_examples=100, deadline=None)
@given(st.lists(_good, min_size=1, max_size=12))
def test_since_drops_the_same_rows_and_clean_batches_take_the_column_road(
    rows: list[dict[str, Any]],
) -> None:
    job = _job(False, since=(T0 + pd.Timedelta(hours=1)).to_pydatetime())
    msgs = [InMessage("ext", 0, i, None, json.dumps(r).encode()) for i, r in enumerate(rows)]
    fast = job._by_columns(msgs, MemoryState(), None)  # noqa: SLF001
    assert fast is not None  # a clean batch: the column road took it
    _same(fast, job._row_by_row(msgs, MemoryState(), None))  # noqa: SLF001


@pytest.mark.parametrize("mark_s", [None, 60, 61])
def test_rows_at_the_watermark_edge_are_judged_alike(mark_s: int | None) -> None:
    """Disorder is 60 s: a row exactly 60 s older than the newest before it is on time, one
    a second older is late; the stored mark counts as a row before the batch."""
    rows = [{"uid": 1, "amount": 1.0, "ok": None, "name": None, "seen": None,
             "ts": (T0 + pd.Timedelta(seconds=s)).isoformat()} for s in (60, 0, -1, 0.5)]  # fmt: skip
    msgs = [InMessage("ext", 0, i, None, json.dumps(r).encode()) for i, r in enumerate(rows)]
    mark = None if mark_s is None else int((T0 + pd.Timedelta(seconds=mark_s)).value // 1000)
    fast, slow = _both(_job(False), msgs, mark)
    _same(fast, slow)
    assert slow.late == (1 if mark_s in (None, 60) else 3)


def test_an_int_in_a_str_field_is_its_text_on_both_roads() -> None:
    """As the mock's log casts it (``source_rules.int_as_text``): a JSON 5 for ``name`` is the
    row's "5"; a bool is still refused."""
    rows = [{"uid": i, "amount": 1.5, "ok": None, "name": v,
             "ts": (T0 + pd.Timedelta(seconds=i)).isoformat(), "seen": None}
            for i, v in enumerate([5, "a", True])]  # fmt: skip
    msgs = [InMessage("ext", 0, i, None, json.dumps(r).encode()) for i, r in enumerate(rows)]
    fast, slow = _both(_job(False), msgs, None)
    _same(fast, slow)
    names = [r["name"] for o in fast.outputs for r in rows_of(o.value)]
    assert sorted(names) == ["5", "a"]
    assert len(fast.errors) == 1 and "name" in fast.errors[0].reason
