"""Offline tables: every offline dataset's history as a Delta table on S3, written exactly
once from its topic by the engine and read by Spark (backfills, offline queries)."""
