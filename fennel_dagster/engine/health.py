"""Stream health of a dataset: lag of the jobs reading it, errors, newest event time."""

from __future__ import annotations

import json
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition

from fennel_dagster.metadata.registry import JobRow
from fennel_dagster.wire import plan


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
                    for t in _partitioned_inputs(job):
                        committed = group.committed([TopicPartition(t, p)], timeout=10)[0].offset
                        end = _end_offsets(c, t).get(p, 0)
                        lag += max(0, end - max(committed, 0))
                finally:
                    group.close()
        last = _newest(servers, topic, ends, ts_field)
        return Health(sum(ends.values()), errors, lag, last)
    finally:
        c.close()


def _newest(servers: str, topic: str, ends: dict[int, int], ts_field: str) -> str | None:
    """The newest event time among the last rows of each partition (the topic's tail ends in
    transaction markers, so read a few offsets back up to the end)."""
    c = Consumer({"bootstrap.servers": servers, "group.id": "fennel-health-tail",
                  "enable.auto.commit": False, "isolation.level": "read_committed",
                  "enable.partition.eof": True})  # fmt: skip
    try:
        tps = [TopicPartition(topic, p, max(0, end - 20)) for p, end in ends.items() if end > 0]
        if not tps:
            return None
        c.assign(tps)
        newest: str | None = None
        done: set[int] = set()
        while len(done) < len(tps):
            m = c.poll(3.0)
            if m is None:
                break
            if m.error():
                done.add(m.partition() or 0)
                continue
            ts = json.loads(m.value() or b"{}").get(ts_field)
            if isinstance(ts, str) and (newest is None or ts > newest):
                newest = ts
        return newest
    finally:
        c.close()


def _partitioned_inputs(job: JobRow) -> list[str]:
    """Dataset topics whose partition p job partition p consumes (source jobs read user
    topics spread over their partitions, and a repartition topic's end offsets count the
    transaction markers its stage writes: neither has a per-partition lag to report)."""
    spec = job.spec
    if isinstance(spec, plan.PipelineJobSpec):
        return [s.topic for s in spec.inputs]
    if isinstance(spec, plan.IndexJobSpec):
        return [spec.input_topic]
    return []
