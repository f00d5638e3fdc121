"""Dagster resources of fennel_dagster: Postgres, Kafka, S3, Spark, Hangar."""
