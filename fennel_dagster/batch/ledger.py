"""An ingest job's ledger: a compacted, single-partition topic of what a source has sent.

S3 sources key it by file (path and ETag), Postgres sources by one key holding the cursor;
both read it the same way: every committed record to the end of the topic, newest value per
key (read_committed, so an aborted attempt's entries never count).
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from fennel_dagster.errors import ExecutionError


class LedgerUnavailable(ExecutionError):
    """The ledger topic did not answer in time (Kafka down or the topic missing)."""


def read_ledger(servers: str, topic: str) -> dict[bytes, bytes]:
    """The newest value of every key on ``topic``, committed records only."""
    c = Consumer({
        "bootstrap.servers": servers, "group.id": f"ledger-{time.time_ns()}",
        "isolation.level": "read_committed", "enable.auto.commit": False,
        "enable.partition.eof": True,
    })  # fmt: skip
    entries: dict[bytes, bytes] = {}
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        if high <= low:
            return entries
        c.assign([TopicPartition(topic, 0, low)])
        while True:
            m = c.poll(5.0)
            if m is None:
                raise LedgerUnavailable(f"ledger {topic} did not answer in time")
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:  # all committed records read
                    return entries
                raise KafkaException(err)
            key = m.key()
            if key is not None:
                entries[key] = m.value() or b""
    finally:
        c.close()
