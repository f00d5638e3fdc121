"""PySpark local[*] with the stack's jars: aggregation, Kafka source, S3A and Postgres JDBC."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from fennel_dagster.s3 import s3_client
from fennel_dagster.settings import Settings
from fennel_dagster.stack.kafka import HEALTH_TOPIC
from fennel_dagster.stack.spark import jdbc_url

pytestmark = pytest.mark.services


def test_the_shared_session_has_the_platform_configuration(
    spark: Any, live_stack: Settings
) -> None:
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
    assert spark.sparkContext.master == live_stack.spark_master


def test_local_session_runs_a_grouped_aggregation(spark: Any) -> None:
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


def test_kafka_connector_reads_the_stack_broker(spark: Any, settings: Settings) -> None:
    records = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", settings.kafka_servers)
        .option("subscribe", HEALTH_TOPIC)
        .option("startingOffsets", "earliest")
        .load()
    )
    assert records.count() >= 1  # `stack up`'s health check wrote at least one record


def test_s3a_writes_parquet_that_boto3_lists_and_spark_reads_back(
    spark: Any, settings: Settings, unique_name: str
) -> None:
    prefix = f"{unique_name}/table"
    df = spark.createDataFrame([(i, float(i) * 1.5) for i in range(100)], ["k", "v"])
    df.repartition(2).write.parquet(f"s3a://{settings.s3_bucket}/{prefix}")

    s3 = s3_client(settings)
    keys = [
        o["Key"] for o in s3.list_objects_v2(Bucket=settings.s3_bucket, Prefix=prefix)["Contents"]
    ]
    assert any(k.endswith("_SUCCESS") for k in keys)
    assert sum(k.endswith(".parquet") for k in keys) == 2

    back = spark.read.parquet(f"s3a://{settings.s3_bucket}/{prefix}")
    assert back.count() == 100
    assert back.agg({"v": "sum"}).collect()[0][0] == pytest.approx(1.5 * sum(range(100)))
    for k in keys:
        s3.delete_object(Bucket=settings.s3_bucket, Key=k)


def test_jdbc_reads_a_postgres_table(spark: Any, settings: Settings, unique_name: str) -> None:
    with psycopg.connect(settings.platform_pg_dsn) as conn:
        conn.execute(f"CREATE TABLE {unique_name} (uid int, spend float8)")
        conn.execute(f"INSERT INTO {unique_name} VALUES (1, 2.5), (2, 4.0)")
    try:
        rows = (
            spark.read.format("jdbc")
            .option("url", jdbc_url(settings))
            .option("driver", "org.postgresql.Driver")
            .option("user", settings.pg_user)
            .option("dbtable", unique_name)
            .load()
            .orderBy("uid")
            .collect()
        )
        assert [(r["uid"], r["spend"]) for r in rows] == [(1, 2.5), (2, 4.0)]
    finally:
        with psycopg.connect(settings.platform_pg_dsn) as conn:
            conn.execute(f"DROP TABLE {unique_name}")
