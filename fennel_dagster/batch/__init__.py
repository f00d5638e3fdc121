"""Batch: the same pipelines on Spark (PySpark) for backfill, replay and offline queries."""
