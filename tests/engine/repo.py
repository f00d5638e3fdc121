"""A small feature repo for engine tests: a Kafka-sourced stream, an aggregate, an index."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd

from fennel_dagster import dataset, field, inputs, meta, pipeline, source
from fennel_dagster.aggregate import Count, Sum
from fennel_dagster.sources import Kafka
from fennel_dagster.window import Continuous

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def graph(
    topic: str, spend_deleted: bool = False, spend_version: int = 1, window: str = "1h"
) -> list[Any]:
    @meta(owner="engine@example.com")
    @source(Kafka(name="events").topic(topic), disorder="1h", cdc="append")
    @dataset
    class Txn:
        uid: int
        amount: float
        ts: datetime

    @meta(owner="engine@example.com", deleted=spend_deleted)
    @dataset(index=True, version=spend_version)
    class Spend:
        uid: int = field(key=True)
        total: float
        n: int
        ts: datetime

        @pipeline
        @inputs(Txn)
        def agg(cls, txn):
            return txn.groupby("uid").aggregate(
                total=Sum(of="amount", window=Continuous(window)),
                n=Count(window=Continuous(window)),
            )

    return [Txn, Spend]


def events(n: int, keys: int = 20, seed: int = 7) -> pd.DataFrame:
    rnd = random.Random(seed)
    rows = []
    for i in range(n):
        t = T0 + timedelta(seconds=30 * i + rnd.randint(-60, 60))
        rows.append({"uid": rnd.randrange(keys), "amount": float(rnd.randint(1, 100)), "ts": t})
    return pd.DataFrame(rows)


def payloads(df: pd.DataFrame) -> list[bytes]:
    return [
        json.dumps({"uid": int(r.uid), "amount": float(r.amount), "ts": r.ts.isoformat()}).encode()
        for r in df.itertuples()
    ]
