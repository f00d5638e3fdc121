"""Stream health of a dataset: lag of the jobs reading it, errors, newest event time."""

from __future__ import annotations

import json
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition

from fennel_dagster.engine.registry import JobRow


@dataclass
class Health:
    messages: int  # rows committed to the dataset's topic so far (high watermarks)
    errors: int  # rows in its error topic
    lag: int  # rows of its inputs not yet processed by the jobs that write it
    last_event: str | None


def _end_offsets(c: Consumer, topic: str) -> dict[int, int]:
    md = c.list_topics(topic, timeout=10).topics.get(topic)
    if md is None or md.error is not None:
        return {}
    return {
        p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in md.partitions
    }


def dataset_health(
    servers: str, topic: str, error_topic: str | None, writers: list[JobRow], ts_field: str
) -> Health:
    c = Consumer(
        {"bootstrap.servers": servers, "group.id": "fennel-health", "enable.auto.commit": False}
    )
    try:
        ends = _end_offsets(c, topic)
        errors = sum(_end_offsets(c, error_topic).values()) if error_topic else 0
        lag = 0
        for job in writers:
            for p in range(job.partitions):
                group = Consumer({"bootstrap.servers": servers, "group.id": f"{job.name}.p{p}",
                                  "enable.auto.commit": False})  # fmt: skip
                try:
                    for t in job.spec.get("inputs", []):
                        committed = group.committed([TopicPartition(t, p)], timeout=10)[0].offset
                        end = _end_offsets(c, t).get(p, 0)
                        lag += max(0, end - max(committed, 0))
                finally:
                    group.close()
        last = None
        for p, end in ends.items():
            if end <= 0:
                continue
            c.assign([TopicPartition(topic, p, end - 1)])
            m = c.poll(3.0)
            if m is not None and not m.error():
                ts = json.loads(m.value()).get(ts_field)
                last = max(last, ts) if last and ts else (ts or last)
        return Health(sum(ends.values()), errors, lag, last)
    finally:
        c.close()
