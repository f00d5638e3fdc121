"""Sources: ``from fennel_dagster.sources import source, Kafka, S3, Postgres, Webhook``."""

from fennel_dagster.declare.sources import S3, Kafka, Postgres, Webhook, source

__all__ = ["S3", "Kafka", "Postgres", "Webhook", "source"]
