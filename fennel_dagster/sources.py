"""Connectors: ``from fennel_dagster.sources import source, sink, Kafka, S3, Postgres, Webhook``
(Fennel's ``fennel.connectors``)."""

from fennel_dagster.declare.sources import (
    HTTP,
    S3,
    Avro,
    BigQuery,
    Certificate,
    Eval,
    Kafka,
    Kinesis,
    Mongo,
    MySQL,
    Postgres,
    Protobuf,
    PubSub,
    Redshift,
    Sample,
    Snowflake,
    Webhook,
    eval,  # noqa: A004 - Fennel's name
    ref,
    sink,
    source,
)

__all__ = [
    "HTTP", "S3", "Avro", "BigQuery", "Certificate", "Eval", "Kafka", "Kinesis", "Mongo", "MySQL",
    "Postgres", "Protobuf", "PubSub", "Redshift", "Sample", "Snowflake", "Webhook", "eval", "ref",
    "sink", "source",
]  # fmt: skip
