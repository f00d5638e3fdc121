"""The feature repos the streaming benchmark commits.

Only the declaration API, which every version of fennel_dagster since the engine landed
understands: the bench loads this file by path into an older checkout too (``--baseline``),
so the before and after engines run the very same declarations.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fennel_dagster import dataset, field, inputs, meta, pipeline, source
from fennel_dagster.aggregate import Count, Sum
from fennel_dagster.sources import Kafka
from fennel_dagster.window import Continuous


def keyless(topic: str) -> list[Any]:
    """Card events (no key) -> Count + Sum per uid over 1 h: rows must be repartitioned."""

    @meta(owner="bench@example.com")
    @source(Kafka(name="bench").topic(topic), disorder="1h", cdc="append")
    @dataset
    class BenchTxn:
        uid: int
        amount: float
        ts: datetime

    @meta(owner="bench@example.com")
    @dataset(index=True)
    class BenchAgg:
        uid: int = field(key=True)
        total: float
        n: int
        ts: datetime

        @pipeline
        @inputs(BenchTxn)
        def agg(cls, txn):
            return txn.groupby("uid").aggregate(
                total=Sum(of="amount", window=Continuous("1h")), n=Count(window=Continuous("1h"))
            )

    return [BenchTxn, BenchAgg]


def keyed(topic: str) -> list[Any]:
    """Account updates keyed by uid -> Count + Sum per uid: the input is already partitioned
    by the group key, so no repartition is needed."""

    @meta(owner="bench@example.com")
    @source(Kafka(name="bench").topic(topic), disorder="1h", cdc="upsert")
    @dataset(index=True)
    class BenchAcct:
        uid: int = field(key=True)
        amount: float
        ts: datetime

    @meta(owner="bench@example.com")
    @dataset(index=True)
    class BenchAgg:
        uid: int = field(key=True)
        total: float
        n: int
        ts: datetime

        @pipeline
        @inputs(BenchAcct)
        def agg(cls, acct):
            return acct.groupby("uid").aggregate(
                total=Sum(of="amount", window=Continuous("1h")), n=Count(window=Continuous("1h"))
            )

    return [BenchAcct, BenchAgg]


REPOS = {"keyless": keyless, "keyed": keyed}
