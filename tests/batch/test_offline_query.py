"""``query_offline`` on Spark equals the MockClient's, row for row, and never leaks the future.

The datasets' offline tables are Delta tables on the S3 server, written from what the
MockClient holds (the engine writes them from the datasets' topics; tests/engine cover that
writer); Spark reads them exactly as it reads a branch's.
"""

from __future__ import annotations

import copy
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fennel_dagster import (
    dataset,
    extractor,
    feature,
    featureset,
    field,
    inputs,
    meta,
    outputs,
    pipeline,
    source,
)
from fennel_dagster.aggregate import Avg, Count, LastK, Max, Sum
from fennel_dagster.batch.catalog import NoOfflineTable, OfflineCatalog
from fennel_dagster.batch.offline_query import (
    OfflineQuery,
    OfflineQueryError,
    SparkOfflineQuery,
    to_pandas,
)
from fennel_dagster.commit.compiler import compile_blueprints, jobs_of
from fennel_dagster.commit.graph import EntityGraph
from fennel_dagster.declare import commit_spec
from fennel_dagster.expr import col
from fennel_dagster.mock import MockClient
from fennel_dagster.offline.table import OfflineTable, to_arrow
from fennel_dagster.query.plan import QueryPlanError
from fennel_dagster.settings import Settings
from fennel_dagster.sources import Webhook
from fennel_dagster.window import Continuous, Tumbling

pytestmark = pytest.mark.services

OWNER = "offline@example.com"
T0 = datetime(2026, 3, 1, tzinfo=UTC)
hook = Webhook(name="hook")


@meta(owner=OWNER)
@source(hook.endpoint("txn"), disorder="14d", cdc="append")
@dataset
class Txn:
    uid: int
    amount: float
    ts: datetime


@meta(owner=OWNER)
@source(hook.endpoint("user"), disorder="14d", cdc="upsert")
@dataset(index=True)
class Profile:
    uid: int = field(key=True)
    country: str
    signup: datetime
    ts: datetime = field(timestamp=True)


@meta(owner=OWNER)
@dataset(index=True)
class Spend:
    uid: int = field(key=True)
    n_1h: int
    sum_2d: float
    max_2d: float
    last_3: list[float]
    ts: datetime = field(timestamp=True)

    @pipeline
    @inputs(Txn)
    def spend(cls, txn):
        return txn.groupby("uid").aggregate(
            n_1h=Count(window=Continuous("1h")),
            sum_2d=Sum(of="amount", window=Continuous("2d")),
            max_2d=Max(of="amount", window=Continuous("2d"), default=0.0),
            last_3=LastK(of="amount", limit=3, dedup=False, window=Continuous("2d")),
        )


@meta(owner=OWNER)
@dataset(index=True)
class Daily:
    uid: int = field(key=True)
    n_day: int
    mean_day: float
    ts: datetime = field(timestamp=True)

    @pipeline
    @inputs(Txn)
    def daily(cls, txn):
        return txn.groupby("uid").aggregate(
            n_day=Count(window=Tumbling("1d")),
            mean_day=Avg(of="amount", window=Tumbling("1d"), default=-2.5),
        )


@meta(owner=OWNER)
@featureset
class U:
    uid: int
    n_1h: int = feature(Spend.n_1h, default=0)
    sum_2d: float = feature(Spend.sum_2d, default=0.0)
    max_2d: float = feature(Spend.max_2d, default=-1.0)
    n_day: int = feature(Daily.n_day, default=0)
    mean_day: float | None = feature(Daily.mean_day)  # not found: the Avg's default
    country: str = feature(Profile.country, default="none")
    big: bool = feature(col("sum_2d") > 100.0)
    home: str | None = feature(Profile.country)  # no default: missing where not found
    home_or: str = feature(home, default="nowhere")  # an alias, defaulted
    age_days: float
    last_plus_max: float

    @classmethod
    def unknown_age(cls) -> float:  # a method of the featureset: `cls.` in an extractor
        return -1.0

    @extractor(deps=[Profile])
    @inputs("uid")
    @outputs("age_days")
    def age(cls, ts: pd.Series, uid: pd.Series):
        p, found = Profile.lookup(ts, uid=uid, fields=["signup"])
        age = (ts - p["signup"]).dt.total_seconds() / 86400.0
        return pd.DataFrame({"age_days": age.where(found, cls.unknown_age()).fillna(-1.0)})

    @extractor(deps=[Spend, Profile])
    @inputs("uid")
    @outputs("last_plus_max")
    def chained(cls, ts: pd.Series, uid: pd.Series):
        s, found = Spend.lookup(ts, uid=uid, fields=["last_3", "max_2d"])
        # a chain: the second lookup's keys come from the first one's answer
        nxt = s["max_2d"].where(found, 0.0).fillna(0.0).astype("int64") % 5
        p, pf = Profile.lookup(ts, uid=nxt)
        lasts = s["last_3"].map(lambda v: float(v[-1]) if isinstance(v, list) and v else 0.0)
        return pd.DataFrame({"last_plus_max": lasts + pf.astype(float)})


@meta(owner=OWNER)
@featureset
class Group:
    """Lookups keyed by a list: an element a key (Fennel's list lookup)."""

    uid: list[int]
    countries: list[str] = feature(Profile.country, default="none")
    sums: list[float | None] = feature(Spend.sum_2d)  # served by an aggregate


DATASETS = [Txn, Profile, Spend, Daily]
FEATURESETS = [U, Group]


def _events(seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    n = 300
    txn = pd.DataFrame({
        "uid": rng.integers(0, 8, n),
        "amount": rng.integers(1, 80, n).astype(float),
        "ts": [T0 + timedelta(minutes=int(m)) for m in np.sort(rng.integers(0, 5 * 24 * 60, n))],
    })  # fmt: skip
    profile = pd.DataFrame({
        "uid": [0, 1, 2, 3, 4, 1, 2],
        "country": ["NL", "DE", "FR", "US", "UK", "AT", "BE"],
        "signup": [T0 - timedelta(days=d) for d in (10, 20, 30, 40, 50, 20, 30)],
        "ts": [T0 + timedelta(hours=h) for h in (0, 1, 2, 3, 4, 50, 70)],
    })  # fmt: skip
    return txn, profile


def _mock(txn: pd.DataFrame, profile: pd.DataFrame) -> MockClient:
    client = MockClient()
    client.commit("offline", datasets=DATASETS, featuresets=FEATURESETS)
    client.log("hook", "txn", txn)
    client.log("hook", "user", profile)
    return client


def _catalog(settings: Settings, client: MockClient, namespace: str) -> OfflineCatalog:
    """The branch's compiled jobs, with each offline table holding the mock's rows."""
    commit = commit_spec("offline", DATASETS, FEATURESETS)
    jobs = jobs_of(compile_blueprints(EntityGraph.build(commit), namespace))
    catalog = OfflineCatalog(settings, jobs)
    for name, table in catalog.tables.items():
        rows = client.get_dataset_df(name)
        if rows.empty:
            continue
        n = len(rows)
        arrow = to_arrow(rows, pd.Series([False] * n), [0] * n, list(range(n)), table.dataset)
        OfflineTable(settings, table).append(arrow, {})
    return catalog


def _spine(seed: int, rows: int = 120) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    stamps = [T0 + timedelta(seconds=int(s)) for s in rng.integers(-3600, 6 * 86400, rows)]
    return pd.DataFrame({"U.uid": rng.integers(0, 10, rows), "when": stamps})


def _same(got: pd.DataFrame, want: pd.DataFrame) -> None:
    assert list(got.columns) == list(want.columns)
    assert len(got) == len(want)
    for c in want.columns:
        for i, (a, b) in enumerate(zip(got[c].tolist(), want[c].tolist(), strict=True)):
            assert _norm(a) == _norm(b), f"row {i} column {c}: Spark {a!r}, mock {b!r}"


def _norm(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if isinstance(v, list):
        return [_norm(x) for x in v]
    if isinstance(v, float | np.floating):
        return None if math.isnan(v) else round(float(v), 6)
    if isinstance(v, pd.Timestamp | datetime):
        return pd.Timestamp(v).tz_convert("UTC") if pd.Timestamp(v).tzinfo else pd.Timestamp(v)
    if v is None or v is pd.NA:
        return None
    if isinstance(v, np.integer | np.bool_):
        return v.item()
    return v


@pytest.fixture(scope="module")
def world(live_stack: Settings, spark: Any) -> tuple[MockClient, SparkOfflineQuery]:
    import uuid

    txn, profile = _events(seed=3)
    client = _mock(txn, profile)
    catalog = _catalog(live_stack, client, f"oq{uuid.uuid4().hex[:8]}")
    return client, SparkOfflineQuery(spark, catalog, [_spec_of(client, n) for n in ("U", "Group")])


def _spec_of(client: MockClient, name: str) -> Any:
    return client.featuresets[name]


OUTPUTS = ["U.n_1h", "U.sum_2d", "U.max_2d", "U.n_day", "U.mean_day", "U.country", "U.big",
           "U.home_or", "U.age_days", "U.last_plus_max"]  # fmt: skip


def _query(oq: SparkOfflineQuery, spine: pd.DataFrame, outputs: list[str]) -> pd.DataFrame:
    q = OfflineQuery(("U.uid",), tuple(outputs), "when")
    return to_pandas(oq.run(q, oq.spark.createDataFrame(spine)))


def test_spark_query_offline_equals_the_mock(world: tuple[MockClient, SparkOfflineQuery]) -> None:
    client, oq = world
    spine = _spine(seed=5)
    want = client.query_offline(["U.uid"], OUTPUTS, spine, "when")
    got = _query(oq, spine, OUTPUTS)
    _same(got, want)
    # a key without a row answers the aggregation's default (Fennel's lookups), not the
    # feature's: the Max's 0.0 and the Avg's -2.5, on an aggregate's state and on an index
    assert -1.0 not in want["U.max_2d"].tolist() and 0.0 in want["U.max_2d"].tolist()
    assert -2.5 in want["U.mean_day"].tolist()


def test_list_lookups_on_spark_equal_the_mocks(world: tuple[MockClient, SparkOfflineQuery]) -> None:
    client, oq = world
    rng = np.random.default_rng(11)
    spine = pd.DataFrame({
        "Group.uid": [[int(u) for u in rng.integers(0, 10, int(n))] for n in rng.integers(0, 4, 40)],
        "when": [T0 + timedelta(seconds=int(s)) for s in rng.integers(-3600, 6 * 86400, 40)],
    })  # fmt: skip
    outputs = ["Group.countries", "Group.sums"]
    want = client.query_offline(["Group.uid"], outputs, spine, "when")
    q = OfflineQuery(("Group.uid",), tuple(outputs), "when")
    got = to_pandas(oq.run(q, oq.spark.createDataFrame(spine)))
    _same(got, want)
    flat = [c for row in want["Group.countries"] for c in row]
    assert "none" in flat and set(flat) - {"none"}, "found and missing keys both compared"
    assert [] in want["Group.countries"].tolist(), "a row of no keys compared"


def test_no_leakage_at_and_after_an_event(world: tuple[MockClient, SparkOfflineQuery]) -> None:
    """An event at t counts for a row at t (lookups see versions at or before the row's
    time, as online) and never for a row a microsecond before it."""
    client, oq = world
    txn = client.get_dataset_df("Txn")
    first = txn.sort_values("ts").iloc[40]
    t = pd.Timestamp(first["ts"])
    uid = int(first["uid"])
    spine = pd.DataFrame({
        "U.uid": [uid, uid, uid],
        "when": [t - pd.Timedelta(microseconds=1), t, t + pd.Timedelta(microseconds=1)],
    })  # fmt: skip
    got = _query(oq, spine, ["U.n_1h", "U.sum_2d"])
    want = client.query_offline(["U.uid"], ["U.n_1h", "U.sum_2d"], spine, "when")
    _same(got, want)
    same_instant = int(((txn["uid"] == uid).to_numpy() & (txn["ts"] == t).to_numpy()).sum())
    assert got["U.n_1h"][1] - got["U.n_1h"][0] == same_instant >= 1
    assert got["U.n_1h"][2] == got["U.n_1h"][1]


def test_bad_input_names_the_input_and_the_fix(
    world: tuple[MockClient, SparkOfflineQuery],
) -> None:
    _, oq = world
    spine = oq.spark.createDataFrame(_spine(seed=1, rows=3))
    with pytest.raises(OfflineQueryError, match="no timestamp column 'at'.*timestamp_column="):
        oq.run(OfflineQuery(("U.uid",), ("U.n_1h",), "at"), spine)
    with pytest.raises(OfflineQueryError, match="input feature U.uid has no column 'user'"):
        oq.run(OfflineQuery(("U.uid",), ("U.n_1h",), "when", {"U.uid": "user"}), spine)
    with pytest.raises(QueryPlanError, match="unknown feature U.nope"):
        oq.run(OfflineQuery(("U.uid",), ("U.nope",), "when"), spine)
    with pytest.raises(QueryPlanError, match="U.uid is neither an input"):
        oq.run(OfflineQuery((), ("U.n_1h",), "when"), spine)
    bare = SparkOfflineQuery(oq.spark, copy.copy(oq.catalog), oq.featuresets)
    bare.catalog.tables = {}
    with pytest.raises(NoOfflineTable, match="needs dataset Txn's history, but Txn has no off"):
        bare.run(OfflineQuery(("U.uid",), ("U.n_1h",), "when"), spine)  # Spend's input
    with pytest.raises(NoOfflineTable, match="U._auto_country needs dataset Profile's history"):
        bare.run(OfflineQuery(("U.uid",), ("U.country",), "when"), spine)
