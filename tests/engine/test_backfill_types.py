"""Backfill on commit over history of every column kind: lists, structs, maps, optional
values, decimals, dates and datetimes. A commit adding a pipeline over such a dataset failed
on Spark ("Cannot convert pyarrow.lib.ChunkedArray to pyarrow.lib.Array") after minutes;
now its seeded outputs equal the MockClient's (real Kafka, S3, Postgres, Spark, Delta).

No ``from __future__ import annotations``: the datasets' fields name a struct.
"""

import json
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal as PyDecimal
from typing import Any, Optional

import pandas as pd
import pytest

from fennel_dagster import dataset, inputs, meta, pipeline, source
from fennel_dagster.client import LocalClient
from fennel_dagster.dtypes import Decimal, struct
from fennel_dagster.metadata.db import connect
from fennel_dagster.metadata.registry import list_jobs
from fennel_dagster.mock import MockClient
from fennel_dagster.offline.table import OfflineTable
from fennel_dagster.ops.rows import json_value, to_records
from fennel_dagster.settings import Settings
from fennel_dagster.sources import Kafka, Webhook
from fennel_dagster.wire import plan
from tests.engine.harness import (
    commit,
    create_topic,
    offline_writer,
    produce_rows,
    read_topic,
    table_rows,
    wait_for,
)

pytestmark = pytest.mark.services
T0 = datetime(2026, 1, 1, tzinfo=UTC)
N = 40


@struct
class Place:
    city: str
    zip: int


def graph(topic: str, with_pipeline: bool, webhook: str | None = None) -> list[Any]:
    """``Rich`` from Kafka ``topic`` (or ``webhook``'s endpoint "Rich"); ``Kept``, a filter of
    it, with ``with_pipeline``."""
    feed = Webhook(name=webhook).endpoint("Rich") if webhook else Kafka(name="events").topic(topic)

    @meta(owner="engine@example.com")
    @source(feed, disorder="1h", cdc="append")
    @dataset
    class Rich:
        uid: int
        tags: list[str]
        place: Place
        places: list[Place]
        scores: dict[str, float]
        note: Optional[str]  # noqa: UP045 - Fennel's spelling
        price: Decimal[2]
        maybe_price: Optional[Decimal[2]]  # noqa: UP045
        day: date
        seen: Optional[datetime]  # noqa: UP045
        ts: datetime

    @meta(owner="engine@example.com")
    @dataset
    class Kept:
        uid: int
        tags: list[str]
        place: Place
        places: list[Place]
        scores: dict[str, float]
        note: Optional[str]  # noqa: UP045
        price: Decimal[2]
        maybe_price: Optional[Decimal[2]]  # noqa: UP045
        day: date
        seen: Optional[datetime]  # noqa: UP045
        ts: datetime

        @pipeline
        @inputs(Rich)
        def keep(cls, rich):
            return rich.filter(lambda df: df["uid"] % 4 != 3)

    return [Rich, Kept] if with_pipeline else [Rich]


def rows(n: int) -> pd.DataFrame:
    out = []
    for i in range(n):
        out.append({
            "uid": i, "tags": [f"t{j}" for j in range(i % 3)],
            "place": Place(city=f"c{i % 5}", zip=1000 + i),
            "places": [Place(city="x", zip=j) for j in range(i % 2)],
            "scores": {f"s{j}": j / 4 for j in range(i % 3)},
            "note": None if i % 2 else f"n{i}",
            "price": PyDecimal(i * 7919 + 3).scaleb(-2),
            "maybe_price": None if i % 3 else PyDecimal(i).scaleb(-2),
            "day": date(2025, 1, 1) + timedelta(days=i),
            "seen": None if i % 4 == 1 else T0 - timedelta(days=i, microseconds=i),
            "ts": T0 + timedelta(minutes=i),
        })  # fmt: skip
    return pd.DataFrame(out)


def _canon(records: list[dict[str, Any]]) -> list[str]:
    """Rows as sorted canonical JSON text: the topic's and the mock's compare alike."""
    keep = ("uid", "tags", "place", "places", "scores", "note", "price", "maybe_price", "day",
            "seen", "ts")  # fmt: skip
    out = []
    for r in records:
        row = {k: json_value(r.get(k)) for k in keep}
        for k in ("price", "maybe_price"):  # a decimal as its value, however written
            row[k] = (
                None if row[k] is None else str(PyDecimal(str(row[k])).quantize(PyDecimal("0.01")))
            )
        for k in ("seen", "ts"):
            row[k] = None if row[k] is None else pd.Timestamp(row[k]).isoformat()
        out.append(json.dumps(row, sort_keys=True))
    return sorted(out)


def test_a_pipeline_over_history_of_every_column_kind_back_fills_as_the_mock(
    engine_settings: Settings, spark: Any
) -> None:
    s = engine_settings.with_(offline_flush_s=0.2)
    raw = f"{s.namespace}.raw"
    create_topic(s, raw)
    jobs = commit(s, graph(raw, with_pipeline=False))
    rich = jobs["offline:Rich"]
    assert isinstance(rich.spec, plan.OfflineJobSpec)
    ev = rows(N)
    produce_rows(s, rich.spec.input_topic, to_records(ev), by="uid")
    writer = offline_writer(s, rich)
    try:
        table = OfflineTable(s, rich.spec.table)
        wait_for(lambda: len(table_rows(table)) >= N, 90, "Rich's history in its table")
    finally:
        writer.terminate()
        writer.join(30)

    lines: list[str] = []
    datasets = graph(raw, with_pipeline=True)
    with LocalClient(s, on_progress=lines.append) as client:
        client._spark = spark
        client.commit("add Kept", datasets=datasets)
    done = [line for line in lines if line.startswith("backfill Kept.keep: ")]
    assert done and f"{N} history rows" in done[0], lines

    with connect(s, s.pg_schema) as conn:
        pipe = next(j for j in list_jobs(conn) if j.kind == "pipeline")
    assert isinstance(pipe.spec, plan.PipelineJobSpec)
    seeded = [r for _, _, r in read_topic(s, pipe.spec.output_topic, 4)]
    mock = MockClient()
    mock.commit("add Kept", datasets=datasets)
    mock.log(datasets[0], ev)
    want = mock.inspect("Kept", n=N)
    assert len(seeded) == len(want) == N - N // 4
    assert _canon(seeded) == _canon(to_records(want))
