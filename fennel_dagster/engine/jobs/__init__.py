"""Job logic per job kind: source ingestion, pipeline, index. Pure: no Kafka, no RocksDB."""
