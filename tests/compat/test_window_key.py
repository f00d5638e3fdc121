"""``groupby(..., window=...)``: the window as a key of the output, as Fennel declares it.

Each test states the rows Fennel's documentation and client tests expect, on the mock (the
engine's operators). Spark's rows equal the mock's: ``tests/batch/test_stateful_parity.py``
(``*_window_key``, ``test_sessions_as_they_grow``) and ``tests/engine/test_engine_parity.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
import pytest

from fennel_dagster import dataset, field, inputs, meta, pipeline, source
from fennel_dagster.aggregate import Count, Max, Sum
from fennel_dagster.api import answer_shape
from fennel_dagster.declare import DeclarationError
from fennel_dagster.dtypes import Window
from fennel_dagster.mock import MockClient
from fennel_dagster.sources import Webhook
from fennel_dagster.window import Continuous, Hopping, Session, Tumbling
from fennel_dagster.wire import spec

OWNER = "windows@example.com"
T0 = datetime(2023, 1, 16, 11, 0, 0, tzinfo=UTC)


@meta(owner=OWNER)
@source(Webhook(name="hook").endpoint("ev"), disorder="14d", cdc="append")
@dataset
class Event:
    uid: int
    amount: int
    ts: datetime


@meta(owner=OWNER)
@dataset(index=True)
class Latest:
    uid: int = field(key=True)
    amount: int
    ts: datetime

    @pipeline
    @inputs(Event)
    def latest(cls, ev):
        return ev.groupby("uid").latest()


def _by_window(kind: str, *spans: str, emit: str = "eager", with_aggs: bool = True) -> type:
    """A dataset ``Stats`` of Event grouped by uid and a window of ``kind`` (literals only:
    the pipeline ships as source)."""
    if with_aggs:

        @meta(owner=OWNER)
        @dataset(index=True)
        class Stats:
            uid: int = field(key=True)
            window: Window = field(key=True)
            n: int
            total: int
            ts: datetime

            @pipeline
            @inputs(Event)
            def stats(cls, ev):
                windows = {"tumbling": Tumbling, "hopping": Hopping, "session": Session}
                return ev.groupby("uid", window=windows[kind](*spans)).aggregate(
                    n=Count(), total=Sum(of="amount"), emit=emit
                )

        return Stats

    @meta(owner=OWNER)
    @dataset(index=True)
    class Stats:  # type: ignore[no-redef]
        uid: int = field(key=True)
        window: Window = field(key=True)
        ts: datetime

        @pipeline
        @inputs(Event)
        def stats(cls, ev):
            windows = {"tumbling": Tumbling, "hopping": Hopping, "session": Session}
            return ev.groupby("uid", window=windows[kind](*spans)).aggregate(emit=emit)

    return Stats


def _run(ds: type, seconds: list[int], uid: int = 1) -> list[tuple[Any, ...]]:
    """The rows of ``ds`` after events of ``uid`` at T0 + each of ``seconds`` (amount = its
    position), as (uid, begin s, end us, n, total, ts us) offsets from T0."""
    client = MockClient()
    client.commit("windows", datasets=[Event, ds])
    rows = [
        {"uid": uid, "amount": i, "ts": T0 + timedelta(seconds=s)} for i, s in enumerate(seconds)
    ]
    client.log("hook", "ev", pd.DataFrame(rows))
    out = client.get_dataset_df("Stats").to_dict("records")

    def us(t: Any) -> int:
        return int((pd.Timestamp(t) - pd.Timestamp(T0)) / pd.Timedelta(microseconds=1))

    return sorted(
        (r["uid"], us(r["window"]["begin"]) // 10**6, us(r["window"]["end"]),
         r.get("n"), r.get("total"), us(r["ts"]))
        for r in out
    )  # fmt: skip


S = 10**6  # a second in microseconds


def test_tumbling_windows_emit_when_closed_stamped_at_their_end() -> None:
    got = _run(_by_window("tumbling", "10s"), [1, 2, 9, 10, 15, 21])
    # [0, 10) and [10, 20) closed by the event at 21; [20, 30) still open
    assert got == [(1, 0, 10 * S, 3, 0 + 1 + 2, 10 * S), (1, 10, 20 * S, 2, 3 + 4, 20 * S)]


def test_hopping_windows_overlap() -> None:
    got = _run(_by_window("hopping", "10s", "5s", emit="final"), [1, 7, 12, 21])
    assert got == [
        (1, -5, 5 * S, 1, 0, 5 * S),
        (1, 0, 10 * S, 2, 0 + 1, 10 * S),
        (1, 5, 15 * S, 2, 1 + 2, 15 * S),
        (1, 10, 20 * S, 1, 2, 20 * S),
    ]


def test_a_final_session_ends_a_microsecond_after_its_last_event() -> None:
    got = _run(_by_window("session", "3s", emit="final"), [25, 26, 28, 30, 33, 37, 38])
    # 30 -> 33 is the gap itself: one session (as in Fennel); 33 -> 37 is 4 s: it closes
    assert got == [(1, 25, 33 * S + 1, 5, 0 + 1 + 2 + 3 + 4, 33 * S + 1)]


def test_an_eager_session_is_emitted_as_it_grows() -> None:
    got = _run(_by_window("session", "3s"), [25, 26, 30, 37])
    assert got == [
        (1, 25, 25 * S + 1, 1, 0, 25 * S + 1),
        (1, 25, 26 * S + 1, 2, 1, 26 * S + 1),
        (1, 30, 30 * S + 1, 1, 2, 30 * S + 1),  # 26 -> 30 is a gap of 4 s: a new session
        (1, 37, 37 * S + 1, 1, 3, 37 * S + 1),
    ]


def test_fennels_documented_session_lookup() -> None:
    """Fennel's ``operators/window.py`` example: sessions keyed by uid and window, looked up
    by the window's extent, the second session still open."""
    sessions = _by_window("session", "15m", with_aggs=False)
    client = MockClient()
    client.commit("windows", datasets=[Event, sessions])
    day = datetime(2021, 1, 1, tzinfo=UTC)
    client.log("hook", "ev", pd.DataFrame([
        {"uid": 1, "amount": 10, "ts": day},
        {"uid": 1, "amount": 20, "ts": day + timedelta(minutes=10)},
        {"uid": 2, "amount": 30, "ts": day + timedelta(days=1, minutes=10)},
        {"uid": 2, "amount": 40, "ts": day + timedelta(days=1, minutes=15)},
    ]))  # fmt: skip
    micro = timedelta(microseconds=1)
    ends = [day + timedelta(minutes=10) + micro, day + timedelta(days=1, minutes=15) + micro]
    df, found = client.lookup(
        "Stats",
        timestamps=pd.Series(ends),
        keys=pd.DataFrame({
            "uid": [1, 2],
            "window": [{"begin": day, "end": ends[0]},
                       {"begin": day + timedelta(days=1, minutes=10), "end": ends[1]}],
        }),
    )  # fmt: skip
    assert found.tolist() == [True, True]
    assert df["uid"].tolist() == [1, 2]
    # the same session a microsecond narrower is another key: not found
    _, found = client.lookup("Stats", keys=pd.DataFrame(
        {"uid": [1], "window": [{"begin": day, "end": ends[0] - micro}]}))  # fmt: skip
    assert found.tolist() == [False]


def test_a_dataset_without_the_window_key_is_refused() -> None:
    with pytest.raises(DeclarationError, match="declare `window: Window`"):
        _without_window_key()


def _without_window_key() -> None:
    @meta(owner=OWNER)
    @dataset(index=True)
    class Stats:
        uid: int = field(key=True)
        n: int
        ts: datetime

        @pipeline
        @inputs(Event)
        def stats(cls, ev):
            return ev.groupby("uid", window=Tumbling("1h")).aggregate(n=Count())


@pytest.mark.parametrize(
    ("case", "match"),
    [
        ("first", "takes only aggregate"),
        ("continuous", "Tumbling, Hopping or Session"),
        ("nothing", "at least one aggregation"),
        ("other window", "not be different from default window"),
        ("keyed input", "over a keyed dataset"),
    ],
)
def test_misdeclared_window_keys_name_the_fix(case: str, match: str) -> None:
    with pytest.raises(DeclarationError, match=match):

        @meta(owner=OWNER)
        @dataset(index=True)
        class Stats:
            uid: int = field(key=True)
            window: Window = field(key=True)
            ts: datetime

            @pipeline
            @inputs(Event, Latest)
            def stats(cls, ev, latest):
                if case == "keyed input":
                    return latest.groupby("uid", window=Session("1h")).aggregate()
                if case == "first":
                    return ev.groupby("uid", window=Session("1h")).first()
                if case == "continuous":
                    return ev.groupby("uid", window=Continuous("1h")).aggregate()
                if case == "nothing":
                    return ev.groupby("uid").aggregate()
                return ev.groupby("uid", window=Tumbling("1h")).aggregate(
                    top=Max(of="amount", window=Tumbling("2h"))
                )


def test_forever_is_not_a_tumbling_window() -> None:
    with pytest.raises(ValueError, match="'forever' is not a valid duration value for Tumbling"):
        Tumbling("forever")


def test_a_lookup_answers_windows_as_objects_in_utc() -> None:
    """Fennel's lookups give struct fields as objects (``row.window.begin``,
    ``.as_json()``); a key given as naive or ISO times comes back in UTC."""
    client = MockClient()
    client.commit("windows", datasets=[Event, _by_window("tumbling", "10s")])
    client.log("hook", "ev", pd.DataFrame([
        {"uid": 1, "amount": 5, "ts": T0 + timedelta(seconds=3)},
        {"uid": 1, "amount": 6, "ts": T0 + timedelta(seconds=12)},
    ]))  # fmt: skip
    naive = T0.replace(tzinfo=None)
    df, found = client.lookup("Stats", keys=pd.DataFrame({
        "uid": [1, 1],
        "window": [{"begin": naive, "end": naive + timedelta(seconds=10)},
                   {"begin": T0.isoformat(), "end": (T0 + timedelta(seconds=10)).isoformat()}],
    }))  # fmt: skip
    assert found.tolist() == [True, True]
    assert df["n"].tolist() == [1, 1]
    for w in df["window"].tolist():
        assert isinstance(w, Window)
        assert (w.begin, w.end) == (T0, T0 + timedelta(seconds=10))
        assert w.as_json() == {"begin": T0, "end": T0 + timedelta(seconds=10)}
    series, _ = client.lookup("Stats", keys=df[["uid", "window"]], fields=["window"])
    assert series.tolist() == df["window"].tolist()  # Window objects as keys too


def test_dataset_lookup_in_code_answers_struct_objects_too() -> None:
    """``Stats.lookup(ts, ...)`` called by a test or an extractor: its struct values are
    objects of their class (``row.window.begin``), as the client's lookups give them."""
    client = MockClient()
    stats = _by_window("tumbling", "10s")
    client.commit("windows", datasets=[Event, stats])
    client.log("hook", "ev", pd.DataFrame([
        {"uid": 1, "amount": 5, "ts": T0 + timedelta(seconds=3)},
        {"uid": 1, "amount": 6, "ts": T0 + timedelta(seconds=12)},
    ]))  # fmt: skip
    key = {"begin": T0, "end": T0 + timedelta(seconds=10)}
    df, found = stats.lookup(pd.Series([T0 + timedelta(minutes=1)]), uid=pd.Series([1]),
                             window=pd.Series([key]))  # type: ignore[attr-defined]  # fmt: skip
    assert found.tolist() == [True]
    window = df["window"].tolist()[0]
    assert isinstance(window, Window) and (window.begin, window.end) == (key["begin"], key["end"])


def test_a_struct_the_client_never_declared_still_answers_objects() -> None:
    point = spec.StructType("Point", (spec.StructField("x", spec.IntType()),
                                      spec.StructField("y", spec.IntType())))  # fmt: skip
    data, _ = answer_shape(
        pd.DataFrame({"p": [{"x": 1, "y": 2}, None]}), pd.Series([True, False]), None,
        {"p": spec.OptionalType(point)},
    )  # fmt: skip
    got = data["p"].tolist()
    assert (got[0].x, got[0].y, got[0].as_json()) == (1, 2, {"x": 1, "y": 2})
    assert got[1] is pd.NA
