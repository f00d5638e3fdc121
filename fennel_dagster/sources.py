"""Connectors: ``from fennel_dagster.sources import source, sink, Kafka, S3, Postgres, Webhook``
(Fennel's ``fennel.connectors``)."""

from fennel_dagster.declare.sources import S3, Kafka, Postgres, Webhook, sink, source

__all__ = ["S3", "Kafka", "Postgres", "Webhook", "sink", "source"]
