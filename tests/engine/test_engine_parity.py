"""The stream engine on real Kafka, Spark and the MockClient give the same rows, per operator
and per window kind.

One commit holds a derived dataset per operator; one event stream (nulls, several keys, a
join's right side with versions, every row once, in event-time order as a stream delivers
it) goes to the engine through Kafka, to Spark as DataFrames and to the mock as one log.
A last event of its own key, a day later, moves the watermark past every window so the
engine closes them as the batch executors do at the end of their input; its rows are left
out of the comparison. Each named test compares one dataset's rows from all three.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal as PyDecimal
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from fennel_dagster import dataset, field, inputs, meta, pipeline, source
from fennel_dagster.aggregate import Avg, Count, Distinct, LastK, Max, Min, Sum
from fennel_dagster.client import LocalClient
from fennel_dagster.dtypes import Decimal, Window
from fennel_dagster.expr import col
from fennel_dagster.metadata.db import connect
from fennel_dagster.metadata.registry import list_jobs
from fennel_dagster.ops.rows import to_records
from fennel_dagster.settings import Settings
from fennel_dagster.sources import Webhook
from fennel_dagster.window import Continuous, Hopping, Session, Tumbling
from fennel_dagster.wire import plan, spec
from tests.batch.test_stateful_parity import (
    _columns,
    _mock_rows,
    _multiset,
    _spark_rows,
    fennel_join,
)
from tests.engine.harness import Fleet, produce_rows, read_topic, wait_for
from tests.platform import drop_platform

pytestmark = pytest.mark.services
OWNER = "parity@example.com"
T0 = datetime(2026, 2, 1, tzinfo=UTC)
FLUSH_UID = 99


@meta(owner=OWNER)
@source(Webhook(name="hook").endpoint("ev"), disorder="1h")
@dataset
class Ev:
    uid: int
    v: float | None
    s: str
    ts: datetime


@meta(owner=OWNER)
@source(Webhook(name="hook").endpoint("profile"), cdc="upsert", disorder="1h")
@dataset(index=True)
class Profile:
    uid: int = field(key=True)
    city: str
    ts: datetime


def _aggregate(name: str, kind: str, *spans: str, **extra: Any) -> type:
    """A dataset ``name`` aggregating Ev over one window of ``kind`` (literals only: the
    pipeline ships as source)."""

    class Agg:
        uid: int = field(key=True)
        n: int
        total: float
        mean: float
        low: float | None
        high: float | None
        names: list[str]
        last2: list[str]
        ts: datetime

        @pipeline
        @inputs(Ev)
        def agg(cls, ev):
            windows = {"continuous": Continuous, "tumbling": Tumbling}
            windows.update({"hopping": Hopping, "session": Session})
            window = windows[kind](*spans)
            return ev.groupby("uid").aggregate(
                n=Count(window=window),
                total=Sum(of="v", window=window),
                mean=Avg(of="v", window=window, default=-1.0),
                low=Min(of="v", window=window),
                high=Max(of="v", window=window),
                names=Distinct(of="s", window=window),
                last2=LastK(of="s", limit=2, dedup=False, window=window),
                **extra,
            )

    Agg.__name__ = Agg.__qualname__ = name
    return meta(owner=OWNER)(dataset(index=True)(Agg))


def _by_window(name: str, kind: str, *spans: str, **extra: Any) -> type:
    """A dataset ``name`` of Ev grouped by uid and a window of ``kind``: the window is a key."""

    class ByWindow:
        uid: int = field(key=True)
        window: Window = field(key=True)
        n: int
        total: float
        ts: datetime

        @pipeline
        @inputs(Ev)
        def agg(cls, ev):
            windows = {"tumbling": Tumbling, "hopping": Hopping, "session": Session}
            return ev.groupby("uid", window=windows[kind](*spans)).aggregate(
                n=Count(), total=Sum(of="v"), **extra
            )

    ByWindow.__name__ = ByWindow.__qualname__ = name
    return meta(owner=OWNER)(dataset(index=True)(ByWindow))


@meta(owner=OWNER)
@dataset(index=True)
class Spent:
    """Decimal amounts: read as floats, a Decimal result back at its scale."""

    uid: int = field(key=True)
    hourly: Decimal[2]
    top: Decimal[2]
    mean: float
    ts: datetime

    @pipeline
    @inputs(Ev)
    def spent(cls, ev):
        amounts = ev.dropnull("v").assign(  # cents that no float holds exactly
            "amt",
            Decimal[2],
            lambda df: df["v"].map(lambda x: PyDecimal(int(x) * 7919 + 3).scaleb(-2)),
        )
        return amounts.groupby("uid").aggregate(
            hourly=Sum(of="amt", window=Continuous("1h")),
            top=Max(of="amt", window=Continuous("forever"), default=0.0),
            mean=Avg(of="amt", window=Continuous("forever")),
        )


@meta(owner=OWNER)
@dataset(index=True)
class Spans:
    """Min and Max of dates and datetimes (the tiles read them as integers), and a LastK of
    the same dates, which still reads dates."""

    uid: int = field(key=True)
    first_day: date
    last_day: date | None
    first_at: datetime
    last_at: datetime | None
    days: list[date]
    ts: datetime = field(timestamp=True)

    @pipeline
    @inputs(Ev)
    def spans(cls, ev):
        dated = ev.dropnull("v").assign(
            "day", date, lambda df: df["v"].map(lambda x: date(2000, 1, 1) + timedelta(days=int(x) * 37))
        ).assign(
            "at", datetime,
            lambda df: df["v"].map(lambda x: datetime(2000, 1, 1, tzinfo=UTC)
                                   + timedelta(seconds=int(x) * 86413, microseconds=int(x) + 50)),
        )  # fmt: skip
        return dated.groupby("uid").aggregate(
            first_day=Min(of="day", window=Continuous("forever"), default=date(1970, 1, 1)),
            last_day=Max(of="day", window=Continuous("1h")),
            first_at=Min(of="at", window=Continuous("forever"),
                         default=datetime(1970, 1, 1, tzinfo=UTC)),
            last_at=Max(of="at", window=Continuous("1h")),
            days=LastK(of="day", limit=3, dedup=False, window=Continuous("forever")),
        )  # fmt: skip


BY_WINDOW = {
    "hopping": _by_window("HoppingKeyed", "hopping", "1h", "20m", emit="final"),
    "session": _by_window("SessionsSoFar", "session", "15m"),  # eager: as sessions grow
}

AGGREGATES = {
    "continuous": _aggregate("AggContinuous", "continuous", "1h"),
    "forever": _aggregate("AggForever", "continuous", "forever"),
    "tumbling": _aggregate("AggTumbling", "tumbling", "1h", emit="final"),
    "hopping": _aggregate("AggHopping", "hopping", "1h", "20m", emit="final"),
    "lookback": _aggregate("AggLookback", "hopping", "1h", "20m", "30m", emit="final"),
    "hopping forever": _aggregate("AggHoppingForever", "hopping", "forever", "20m", emit="final"),
    "session": _aggregate("AggSession", "session", "15m", emit="final"),
}


@meta(owner=OWNER)
@dataset(index=True)
class Earliest:
    uid: int = field(key=True)
    v: float | None
    s: str
    ts: datetime

    @pipeline
    @inputs(Ev)
    def first(cls, ev):
        return ev.groupby("uid").first()


@meta(owner=OWNER)
@dataset(index=True)
class Newest:
    uid: int = field(key=True)
    v: float | None
    s: str
    ts: datetime

    @pipeline
    @inputs(Ev)
    def latest(cls, ev):
        return ev.groupby("uid").latest()


@meta(owner=OWNER)
@dataset
class Once:
    uid: int
    v: float | None
    s: str
    ts: datetime

    @pipeline
    @inputs(Ev)
    def dedup(cls, ev):
        return ev.dedup(by=["uid", "s"])


@meta(owner=OWNER)
@dataset
class Hourly:
    uid: int
    v: float | None
    s: str
    ts: datetime

    @pipeline
    @inputs(Ev)
    def dedup(cls, ev):
        return ev.dedup(by=["uid"], window=Tumbling("1h"))


@meta(owner=OWNER)
@dataset
class Located:
    uid: int
    v: float | None
    s: str
    city: str | None
    ts: datetime

    @pipeline
    @inputs(Ev, Profile)
    def join(cls, ev, profile):
        return ev.join(profile, how="left", on=["uid"])


@meta(owner=OWNER)
@dataset
class LocatedAround:
    uid: int
    v: float | None
    s: str
    city: str | None
    ts: datetime

    @pipeline
    @inputs(Ev, Profile)
    def join(cls, ev, profile):
        return ev.join(profile, how="left", on=["uid"], within=("1h", "2h"))


@meta(owner=OWNER)
@dataset
class Shaped:
    uid: int
    doubled: float
    tag: str
    ts: datetime

    @pipeline
    @inputs(Ev)
    def shape(cls, ev):
        kept = ev.filter(~col("v").isnull() & (col("v") > -20))
        withd = kept.assign(doubled=(col("v") * 2).astype(float))
        tagged = withd.assign("tag", str, lambda df: df["s"].str.upper() + "!")
        return tagged.drop(["v", "s"])


DATASETS: list[type] = [Ev, Profile, *AGGREGATES.values(), *BY_WINDOW.values(), Spent,
                        Spans, Earliest, Newest, Once, Hourly, Located, LocatedAround,
                        Shaped]  # fmt: skip


def _events() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Ev rows in event-time order (one instant each), and Profile versions before them."""
    rnd = random.Random(17)
    evs, minute = [], 0
    for _ in range(160):
        minute += rnd.choice([1, 2, 3, 7, 25])
        v = None if rnd.random() < 0.15 else float(rnd.randint(-50, 50))
        evs.append({"uid": rnd.randrange(5), "v": v, "s": rnd.choice("abcd"),
                    "ts": T0 + timedelta(minutes=minute)})  # fmt: skip
    evs.append({"uid": FLUSH_UID, "v": 0.0, "s": "z", "ts": evs[-1]["ts"] + timedelta(days=1)})
    profiles = [{"uid": u, "city": c, "ts": T0 + timedelta(minutes=m)}
                for u, c, m in ((0, "x", 0), (1, "y", 30), (2, "x", 90), (0, "z", 200),
                                (3, "y", 300), (1, "x", 400))]  # fmt: skip
    return evs, profiles


class Runs:
    """Every derived dataset's rows from the engine, Spark and the mock."""

    def __init__(self) -> None:
        self.engine: dict[str, list[dict[str, Any]]] = {}
        self.spark: dict[str, list[dict[str, Any]]] = {}
        self.mock: dict[str, list[dict[str, Any]]] = {}


@pytest.fixture(scope="module")
def runs(
    live_stack: Settings, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Runs]:
    name = f"par{time.time_ns() % 10**9}"
    s = live_stack.with_(pg_schema=name, namespace=name, partitions=1,
                         state_dir=Path(tmp_path_factory.mktemp("state")),
                         engine_snapshot_interval_s=3600.0, engine_txn_interval_ms=50)  # fmt: skip
    evs, profiles = _events()
    out = Runs()
    targets = [d.spec().name for d in DATASETS[2:]]
    for target in targets:
        out.mock[target] = _mock_rows(DATASETS, target, {"profile": profiles, "ev": evs})
        out.spark[target] = _spark_rows(spark, DATASETS, target, {"Ev": evs, "Profile": profiles})
    try:
        with LocalClient(s) as c:
            c.commit("parity", datasets=DATASETS)
        with connect(s, s.pg_schema) as conn:
            jobs = [j for j in list_jobs(conn) if isinstance(j.spec, plan.PipelineJobSpec)]
        topic_of = {j.spec.dataset.name: j.spec.output_topic for j in jobs}
        fleet = Fleet(s)
        for job in jobs:
            fleet.start(job)
        try:
            ev_topic = next(i.topic for j in jobs for i in j.spec.inputs if i.dataset.name == "Ev")
            pr_topic = next(i.topic for j in jobs for i in j.spec.lookups)
            produce_rows(s, pr_topic, to_records(pd.DataFrame(profiles)), partitions=1)
            # the right side indexed before the left arrives: an as-of join then sees the
            # versions that exist at each left row's time (and, with within=(..., after),
            # those up to `after` later), as the batch executors do
            for joins in ("Located", "LocatedAround"):
                job = next(r for _, _, r in fleet.threads if r.job.spec.dataset.name == joins)
                wait_for(lambda j=job: j.stats.messages >= len(profiles), 60,
                         f"the profiles indexed by {joins}")  # fmt: skip
            produce_rows(s, ev_topic, to_records(pd.DataFrame(evs)), partitions=1)
            for target in targets:
                want = len(out.mock[target])
                wait_for(lambda t=target, w=want: len(read_topic(s, topic_of[t], 1, timeout=2)) >= w,
                         120, f"{target}'s rows")  # fmt: skip
            time.sleep(1.0)  # an extra row (a duplicate) would show now
            for target in targets:
                out.engine[target] = [r for _, _, r in read_topic(s, topic_of[target], 1)]
        finally:
            fleet.stop()
        yield out
    finally:
        drop_platform(s)


def _same(runs: Runs, target: str) -> None:
    cols = _columns(DATASETS, target)

    def rows(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        kept = [
            {**r, "ts": pd.Timestamp(r["ts"]),  # a topic's JSON holds a Decimal as its text
             **{c: PyDecimal(r[c]) for c in decimals if isinstance(r.get(c), str)},
             **{c: _typed(r[c], types[c]) for c in types}}  # and a date or datetime so
            for r in records if r["uid"] != FLUSH_UID
        ]  # fmt: skip
        return _multiset(kept, cols)

    target_spec = next(d.spec() for d in DATASETS if d.spec().name == target)
    decimals = [f.name for f in target_spec.fields if isinstance(f.dtype, spec.DecimalType)]
    types = {f.name: f.dtype for f in target_spec.fields
             if f.name != target_spec.timestamp and f.name not in decimals}  # fmt: skip

    engine, spark, mock = (
        rows(runs.engine[target]),
        rows(runs.spark[target]),
        rows(runs.mock[target]),
    )
    assert mock, f"{target}: the mock emitted nothing: the test would prove nothing"
    assert engine == mock, f"{target}: engine != mock"
    assert spark == mock, f"{target}: Spark != mock"


def _typed(v: Any, dtype: spec.DType) -> Any:
    """A date or datetime of a topic's JSON row (its text) as the batch executors give it."""
    while isinstance(dtype, spec.OptionalType):
        dtype = dtype.of
    if isinstance(dtype, spec.ListType) and isinstance(v, list):
        return [_typed(x, dtype.of) for x in v]
    if isinstance(v, str) and isinstance(dtype, spec.DateType):
        return date.fromisoformat(v)
    if isinstance(v, str) and isinstance(dtype, spec.TimestampType):
        return pd.Timestamp(v)
    return v


def test_min_max_of_dates_and_datetimes_on_engine_spark_and_mock(runs: Runs) -> None:
    _same(runs, "Spans")


def test_aggregate_continuous_window_on_engine_spark_and_mock(runs: Runs) -> None:
    _same(runs, "AggContinuous")


def test_aggregate_forever_window_on_engine_spark_and_mock(runs: Runs) -> None:
    _same(runs, "AggForever")


def test_aggregate_tumbling_window_on_engine_spark_and_mock(runs: Runs) -> None:
    _same(runs, "AggTumbling")


def test_aggregate_hopping_window_on_engine_spark_and_mock(runs: Runs) -> None:
    _same(runs, "AggHopping")


def test_aggregate_windows_with_a_lookback_on_engine_spark_and_mock(runs: Runs) -> None:
    _same(runs, "AggLookback")


def test_forever_hopping_windows_on_engine_spark_and_mock(runs: Runs) -> None:
    _same(runs, "AggHoppingForever")


def test_aggregate_session_window_on_engine_spark_and_mock(runs: Runs) -> None:
    _same(runs, "AggSession")


def test_aggregate_by_hopping_window_key_on_engine_spark_and_mock(runs: Runs) -> None:
    _same(runs, "HoppingKeyed")


def test_sessions_as_they_grow_on_engine_spark_and_mock(runs: Runs) -> None:
    _same(runs, "SessionsSoFar")


def test_decimal_aggregates_on_engine_spark_and_mock(runs: Runs) -> None:
    _same(runs, "Spent")


def test_first_on_engine_spark_and_mock(runs: Runs) -> None:
    _same(runs, "Earliest")


def test_latest_on_engine_spark_and_mock(runs: Runs) -> None:
    _same(runs, "Newest")


def test_dedup_on_engine_spark_and_mock(runs: Runs) -> None:
    _same(runs, "Once")


def test_dedup_in_a_tumbling_window_on_engine_spark_and_mock(runs: Runs) -> None:
    _same(runs, "Hourly")


def test_join_on_engine_spark_and_mock(runs: Runs) -> None:
    _same(runs, "Located")


def test_join_within_before_and_after_on_engine_spark_and_mock(runs: Runs) -> None:
    """within=("1h", "2h"): the engine, Spark and the mock agree, and answer as Fennel's
    reference defines the join (the version as of t + 2h, none if older than t - 1h)."""
    _same(runs, "LocatedAround")
    evs, profiles = _events()
    cols = _columns(DATASETS, "LocatedAround")
    fennel = fennel_join([e for e in evs if e["uid"] != FLUSH_UID], profiles, "left", 60, 120)
    mock = [r for r in runs.mock["LocatedAround"] if r["uid"] != FLUSH_UID]
    assert _multiset(mock, cols) == _multiset(fennel, cols)
    plain = [r for r in runs.mock["Located"] if r["uid"] != FLUSH_UID]
    assert _multiset(mock, cols) != _multiset(plain, cols)  # the window changed answers


def test_filter_assign_and_user_code_on_engine_spark_and_mock(runs: Runs) -> None:
    _same(runs, "Shaped")
