"""PySpark local[*] with the stack's jars runs a real aggregation."""

from __future__ import annotations

import pytest

from fennel_dagster.settings import Settings
from fennel_dagster.stack.kafka import HEALTH_TOPIC
from fennel_dagster.stack.spark import spark_session

pytestmark = pytest.mark.services


def test_local_session_aggregates_and_reads_kafka_through_the_fetched_connector(
    settings: Settings,
) -> None:
    spark = spark_session(settings, app="test-spark")
    try:
        df = spark.createDataFrame(
            [(1, 10.0), (1, 5.0), (2, 7.5), (3, 1.0), (3, 2.0)], ["uid", "amount"]
        )
        got = {
            r["uid"]: (r["n"], r["total"])
            for r in df.groupBy("uid")
            .agg({"amount": "sum", "*": "count"})
            .withColumnRenamed("sum(amount)", "total")
            .withColumnRenamed("count(1)", "n")
            .collect()
        }
        assert got == {1: (2, 15.0), 2: (1, 7.5), 3: (2, 3.0)}
        # the Kafka connector fetched by the stack is on the classpath and reads the broker
        records = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", settings.kafka_servers)
            .option("subscribe", HEALTH_TOPIC)
            .option("startingOffsets", "earliest")
            .load()
        )
        assert records.count() >= 1
    finally:
        spark.stop()
