"""Stateless pipelines give the same rows on Spark as on the engine's executor (the mock).

Expression operators run as Spark Columns; user code (lambdas, transforms) runs the
engine's pandas implementation on Arrow batches (stateful operators: test_stateful_parity).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
import pytest

from fennel_dagster import dataset, field, inputs, meta, pipeline, source
from fennel_dagster.batch.pipeline import SparkPipeline, spark_schema
from fennel_dagster.declare import commit_spec
from fennel_dagster.expr import col
from fennel_dagster.mock import MockClient
from fennel_dagster.sources import Webhook

pytestmark = pytest.mark.services

OWNER = "batch@example.com"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def repo() -> list[type]:
    @meta(owner=OWNER)
    @source(Webhook(name="hook").endpoint("txn"))
    @dataset
    class Txn:
        uid: int
        amount: float
        note: str | None
        tags: list[str]
        ts: datetime

    @meta(owner=OWNER)
    @dataset
    class Exprs:
        user: int
        eur: float
        big: bool
        ts: datetime

        @pipeline
        @inputs(Txn)
        def shape(cls, txn):
            return (
                txn.filter(col("amount") > 5)
                .assign(
                    eur=(col("amount") * 0.9).astype(float), big=(col("amount") > 50).astype(bool)
                )
                .rename({"uid": "user"})
                .drop(["amount", "note", "tags"])
            )

    @meta(owner=OWNER)
    @dataset
    class Code:
        uid: int
        doubled: float
        label: str
        ts: datetime

        @pipeline
        @inputs(Txn)
        def code(cls, txn):
            kept = txn.filter(lambda df: df["uid"] % 2 == 0)
            with_double = kept.assign("doubled", float, lambda df: df["amount"] * 2)
            return with_double.transform(
                lambda df: df.assign(label="u" + df["uid"].astype(str))[
                    ["uid", "doubled", "label", "ts"]
                ],
                schema={"uid": int, "doubled": float, "label": str, "ts": datetime},
            )

    @meta(owner=OWNER)
    @dataset
    class Tags:
        uid: int
        tags: str
        ts: datetime

        @pipeline
        @inputs(Txn)
        def explode(cls, txn):
            return txn.explode(["tags"]).dropnull(["tags"]).select(["uid", "tags"])

    @meta(owner=OWNER)
    @dataset
    class Notes:
        uid: int
        note: str
        ts: datetime

        @pipeline
        @inputs(Txn)
        def notes(cls, txn):
            return (
                txn.dropnull()
                .select(["uid", "note"])
                .assign(note=col("note").str.upper().astype(str))
            )

    @meta(owner=OWNER)
    @dataset
    class Fragile:
        uid: int
        amount: float
        inverse: float
        seen: datetime
        note: str | None
        ts: datetime = field(timestamp=True)

        @pipeline
        @inputs(Txn)
        def fragile(cls, txn):  # user code that fails on some rows: the engine leaves them out
            return (
                txn.drop(["tags"])
                .assign("inverse", float, lambda df: df["amount"].map(lambda a: 1.0 / (a % 4)))
                .assign("seen", datetime, lambda df: df["ts"] + pd.Timedelta(seconds=1))
                .assign("note", str | None, lambda df: df["note"].str.upper())
            )

    @meta(owner=OWNER)
    @dataset
    class Renamed:
        uid: int
        remark: str
        at: datetime = field(timestamp=True)

        @pipeline
        @inputs(Txn)
        def renamed(cls, txn):  # the timestamp renamed, then a select that keeps it by itself
            x = txn.rename({"note": "remark", "ts": "at"})
            return x.select("uid", "remark").dropnull("remark")

    return [Txn, Exprs, Code, Tags, Notes, Fragile, Renamed]


def events() -> list[dict[str, Any]]:
    rows = []
    for k in range(40):
        rows.append({
            "uid": k % 7, "amount": float((k * 13) % 97), "note": None if k % 3 == 0 else f"n{k}",
            "tags": [f"t{k % 4}", "x"] if k % 5 else [], "ts": T0 + timedelta(minutes=k),
        })  # fmt: skip
    return rows


def _norm(v: Any) -> Any:
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, pd.Timestamp | datetime):
        return pd.Timestamp(v).tz_localize(None) if pd.Timestamp(v).tzinfo else pd.Timestamp(v)
    if isinstance(v, float):
        return round(v, 9)
    return v


def _multiset(records: list[dict[str, Any]], cols: list[str]) -> list[tuple[Any, ...]]:
    return sorted((tuple(_norm(r[c]) for c in cols) for r in records), key=repr)


@pytest.mark.parametrize("name", ["Exprs", "Code", "Tags", "Notes", "Fragile", "Renamed"])
def test_stateless_pipeline_on_spark_equals_the_engine(name: str, spark: Any) -> None:
    datasets = repo()
    mock = MockClient(strict=False)  # a failing row is an error row, left out
    mock.commit("v1", datasets)
    ev = events()
    mock.log("hook", "txn", pd.DataFrame(ev))
    want = mock.get_dataset_df(name)

    commit = commit_spec("v1", datasets, [])
    by_name = {d.name: d for d in commit.datasets}
    out = by_name[name]
    txn = spark.createDataFrame(ev, spark_schema(by_name["Txn"].fields))
    got = SparkPipeline(out.pipelines[0], by_name).run({"Txn": txn})
    cols = [f.name for f in out.fields]
    rows = [r.asDict() for r in got.select(*cols).collect()]
    assert len(rows) == len(want) > 0
    assert _multiset(rows, cols) == _multiset(want.to_dict("records"), cols)
