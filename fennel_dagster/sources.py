"""Connectors: ``from fennel_dagster.sources import source, sink, Kafka, S3, Postgres, Webhook``
(Fennel's ``fennel.connectors``)."""

from fennel_dagster.declare.sources import (
    S3,
    Eval,
    Kafka,
    Postgres,
    Sample,
    Webhook,
    eval,  # noqa: A004 - Fennel's name
    ref,
    sink,
    source,
)

__all__ = ["S3", "Eval", "Kafka", "Postgres", "Sample", "Webhook", "eval", "ref", "sink", "source"]
