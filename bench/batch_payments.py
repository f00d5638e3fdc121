"""The example repo end to end for the batch benchmark: Spark back-fills examples/payments
(two as-of joins with a Python assign, then a 7-day aggregate with LastK/Distinct on the
engine's operator code and a native 1-day count) vs the stream engine on the same shape.

Spark reads the transactions, users and merchants as Delta tables on S3 and writes each
derived dataset's Delta table, as a backfill does. The engine runs ``fennel-dagster
engine`` on the committed repo (its own topic for the Kafka source), users and merchants
logged through the webhook first; events per CPU-second count the transactions.
"""

from __future__ import annotations

import dataclasses
import os
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.stream_bench import Engine, count_committed, tree_cpu
from examples.payments.datasets import DATASETS
from fennel_dagster.batch.pipeline import SparkPipeline
from fennel_dagster.client import LocalClient
from fennel_dagster.declare import commit_spec
from fennel_dagster.metadata.db import connect
from fennel_dagster.ops.rows import dumps
from fennel_dagster.settings import Settings
from fennel_dagster.wire import spec

T0 = datetime(2026, 1, 1, tzinfo=UTC)
T0_US = int(T0.timestamp() * 1_000_000)
USERS, MERCHANTS = 1000, 200


def make_tables(spark: Any, n: int, root: str) -> None:
    """n transactions (100 ms apart, +-2 s jitter) and the users and merchants, as Delta."""
    from pyspark.sql import functions as F  # noqa: N812

    def pick(values: list[str], salt: int) -> Any:
        arr = F.array(*[F.lit(v) for v in values])
        return F.element_at(arr, (F.abs(F.hash("id", F.lit(salt))) % len(values) + 1).cast("int"))

    txns = spark.range(n).select(
        F.col("id").alias("txn_id"),
        (F.abs(F.hash("id", F.lit(1))) % USERS).cast("long").alias("uid"),
        (F.abs(F.hash("id", F.lit(2))) % MERCHANTS).cast("long").alias("merchant_id"),
        ((F.abs(F.hash("id", F.lit(3))) % 50_000) / 10 + 1).cast("double").alias("amount"),
        pick(["EUR", "GBP", "USD"], 4).alias("currency"),
        pick(["pos", "web", "app"], 5).alias("channel"),
        F.timestamp_micros(F.lit(T0_US) + F.col("id") * 100_000
                           + (F.hash("id", F.lit(6)) % 2_000_000)).alias("ts"),
    )  # fmt: skip
    txns.write.format("delta").mode("overwrite").save(f"{root}/Transaction")
    before = F.lit(T0 - timedelta(days=1)).cast("timestamp")
    users = spark.range(USERS).select(
        F.col("id").alias("uid"), pick(["DE", "FR", "GB", "US"], 7).alias("country"),
        F.lit(T0 - timedelta(days=30)).cast("timestamp").alias("signup_at"),
        before.alias("updated_at"),
    )  # fmt: skip
    users.write.format("delta").mode("overwrite").save(f"{root}/User")
    merchants = spark.range(MERCHANTS).select(
        F.col("id").alias("merchant_id"), pick(["food", "travel", "games"], 8).alias("category"),
        (F.col("id") % 3).cast("long").alias("risk_tier"), before.alias("ts"),
    )  # fmt: skip
    merchants.write.format("delta").mode("overwrite").save(f"{root}/Merchant")


def spark_backfill(spark: Any, root: str, n: int) -> dict[str, float]:
    """EnrichedTransaction, then UserSpend and MerchantVolume from its table."""
    by_name = {d.name: d for d in commit_spec("bench", DATASETS, []).datasets}
    cpu0, t0 = tree_cpu(os.getpid()), time.monotonic()

    def table(name: str) -> Any:
        return spark.read.format("delta").load(f"{root}/{name}")

    def derive(name: str, inputs: dict[str, Any]) -> None:
        out = SparkPipeline(by_name[name].pipelines[0], by_name).run(inputs)
        out.write.format("delta").mode("overwrite").save(f"{root}/out/{name}")

    derive("EnrichedTransaction", {k: table(k) for k in ("Transaction", "User", "Merchant")})
    enriched = spark.read.format("delta").load(f"{root}/out/EnrichedTransaction")
    for name in ("UserSpend", "MerchantVolume"):
        derive(name, {"EnrichedTransaction": enriched})
    wall, cpu = time.monotonic() - t0, tree_cpu(os.getpid()) - cpu0
    return {"events": n, "events/s": n / wall, "events/cpu-s": n / cpu, "wall": wall, "cpu": cpu}


def _with_topic(commit: spec.CommitSpec, topic: str) -> spec.CommitSpec:
    """The example repo with its Kafka source reading ``topic`` (the bench's own)."""
    datasets = []
    for ds in commit.datasets:
        sources = tuple(
            dataclasses.replace(
                s,
                connector=dataclasses.replace(
                    s.connector,
                    config=tuple((k, topic if k == "topic" else v) for k, v in s.connector.config),
                ),
            )  # fmt: skip
            for s in ds.sources
        )
        datasets.append(dataclasses.replace(ds, sources=sources))
    return dataclasses.replace(commit, datasets=tuple(datasets))


def _dataset_topic(s: Settings, entity: str) -> str:
    with connect(s, s.pg_schema, autocommit=True) as conn:
        row = conn.execute(
            "SELECT name FROM assets WHERE kind = 'topic' AND entity = %s "
            "AND spec->>'role' = 'dataset'", (entity,),
        ).fetchone()  # fmt: skip
    assert row is not None, f"{entity} has no dataset topic"
    return str(row[0])


def _transactions(n: int, first: int = 0) -> list[bytes]:
    out = []
    for i in range(first, first + n):
        h = hash((i, 7)) & 0xFFFFFFFF
        out.append(dumps({
            "txn_id": i, "uid": h % USERS, "merchant_id": (h >> 10) % MERCHANTS,
            "amount": float(h % 50_000) / 10 + 1, "currency": ("EUR", "GBP", "USD")[h % 3],
            "channel": ("pos", "web", "app")[(h >> 3) % 3],
            "ts": (T0 + timedelta(milliseconds=100 * i)).isoformat(),
        }))  # fmt: skip
    return out


def commit_payments(s: Settings, partitions: int = 1) -> str:
    """The example repo committed on ``s``, its Kafka source reading a topic of its own
    (returned), the users and merchants logged."""
    topic = f"{s.namespace}.transactions"
    admin = AdminClient({"bootstrap.servers": s.kafka_servers})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(30)
    with LocalClient(s) as client:
        client.commit_spec(_with_topic(commit_spec("bench", DATASETS, []), topic))
        users = pd.DataFrame({"uid": range(USERS), "country": "DE",
                              "signup_at": T0 - timedelta(days=30),
                              "updated_at": T0 - timedelta(days=1)})  # fmt: skip
        merchants = pd.DataFrame({"merchant_id": range(MERCHANTS), "category": "food",
                                  "risk_tier": 1, "ts": T0 - timedelta(days=1)})  # fmt: skip
        client.log("ops_webhook", "users", users)
        client.log("ops_webhook", "merchants", merchants)
    return topic


def engine_backfill(base: Settings, n: int) -> dict[str, float]:
    """The stream engine on the example repo: n transactions through source, joins and both
    aggregates (exactly once), measured from the first to the last output."""
    name = f"{base.namespace}pay"
    s = base.with_(pg_schema=name, namespace=name, state_dir=base.state_path / "pay")
    topic = commit_payments(s)
    spend, volume = _dataset_topic(s, "UserSpend"), _dataset_topic(s, "MerchantVolume")
    engine = Engine(s)
    engine.start()
    p = Producer({"bootstrap.servers": s.kafka_servers, "linger.ms": 20})
    try:
        p.produce(topic, _transactions(1)[0])  # warm-up: runners up, the path is hot
        p.flush(10)
        count_committed(s, spend, 1, 300)
        count_committed(s, volume, 1, 300)
        cpu0, t0 = engine.cpu(), time.monotonic()
        for i, raw in enumerate(_transactions(n, first=1)):
            p.produce(topic, raw)
            if i % 10_000 == 0:
                p.poll(0)
        p.flush(60)
        count_committed(s, spend, n + 1, 1800)
        count_committed(s, volume, n + 1, 1800)
        wall, cpu = time.monotonic() - t0, engine.cpu() - cpu0
    finally:
        engine.stop()
    return {"events": n, "events/s": n / wall, "events/cpu-s": n / cpu, "wall": wall, "cpu": cpu}
