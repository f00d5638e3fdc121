"""A committed dataset's rows, read from its topic: what ``inspect`` and ``get_dataset_df``
answer on the platform (the mock answers them from the rows it keeps).

A dataset's rows are the committed messages of its topic, which its source or pipeline job
writes and its index and offline jobs read; the answer is ordered by the dataset's
timestamp, as the mock orders them. ``newest`` reads only the last rows of each partition.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pandas as pd
from confluent_kafka import Consumer, KafkaError, TopicPartition

from fennel_dagster.engine.lookups import LookupFailed
from fennel_dagster.metadata.registry import JobRow
from fennel_dagster.ops.batches import rows_of
from fennel_dagster.ops.index import DELETED
from fennel_dagster.ops.rows import from_records
from fennel_dagster.wire import plan, spec

MAX_ROWS = 1_000_000  # what one answer carries; larger datasets are read from their topic


class ReadTimedOut(LookupFailed):
    """The dataset's topic did not give the end of every partition in time."""


def dataset_topic(jobs: Sequence[JobRow], dataset: str) -> tuple[str, spec.DatasetSpec]:
    """The topic holding ``dataset``'s rows on a branch (its jobs), and its definition."""
    for j in jobs:
        s = j.spec
        if isinstance(s, plan.SourceJobSpec | plan.PipelineJobSpec) and s.dataset.name == dataset:
            return s.output_topic, s.dataset
    for j in jobs:
        s = j.spec
        if isinstance(s, plan.IndexJobSpec | plan.OfflineJobSpec) and s.dataset.name == dataset:
            return s.input_topic, s.dataset
    raise LookupFailed(f"dataset {dataset} is not committed on this branch; commit it first")


def read_rows(
    servers: str,
    topic: str,
    ds: spec.DatasetSpec,
    newest: int | None = None,
    timeout_s: float = 30.0,
) -> pd.DataFrame:
    """The committed rows of ``ds``'s ``topic`` ordered by its timestamp: all of them, or
    (``newest``) the ``newest`` latest by timestamp among each partition's last ``newest``
    rows. Offsets are not rows (a batch message holds many; transaction markers none), so a
    partition is read back from its end in growing windows until it gave enough rows."""
    c = Consumer({"bootstrap.servers": servers, "group.id": f"fennel-inspect-{time.time_ns()}",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "enable.partition.eof": True})  # fmt: skip
    try:
        md = c.list_topics(topic, timeout=10).topics.get(topic)
        records: list[dict[str, Any]] = []
        for p in sorted(md.partitions) if md is not None else []:
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            window = 4 * newest + 16 if newest is not None else hi - lo
            while hi > lo:
                start = max(lo, hi - window)
                got = [r for r in _read(c, topic, ds, p, start, timeout_s) if not r.get(DELETED)]
                if newest is None or len(got) >= newest or start == lo:
                    records += got
                    break
                window *= 4
            if len(records) > MAX_ROWS:
                raise LookupFailed(
                    f"dataset {ds.name} has over {MAX_ROWS} rows, more than one answer "
                    "carries: inspect(n=...) its newest rows, or read its offline table"
                )
        df = from_records(records, ds.fields)
        df = df.sort_values(ds.timestamp, kind="stable").reset_index(drop=True)
        return df if newest is None else df.iloc[max(0, len(df) - newest) :].reset_index(drop=True)
    finally:
        c.close()


def _read(
    c: Consumer, topic: str, ds: spec.DatasetSpec, p: int, start: int, timeout_s: float
) -> list[dict[str, Any]]:
    """Partition ``p``'s rows from offset ``start`` to its end."""
    c.assign([TopicPartition(topic, p, start)])
    records: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            m = c.poll(0.5)
            if m is None:
                if time.monotonic() > deadline:
                    raise ReadTimedOut(
                        f"dataset {ds.name}: partition {p} of its topic {topic!r} gave no end "
                        f"within {timeout_s:g} s; is the broker up?"
                    )
                continue
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF and m.partition() == p:
                    return records
                continue  # a transient error: the poll retries until the deadline
            value = m.value()
            if value is not None and m.partition() == p:  # a tombstone is no row
                records += rows_of(value, ds.fields)
    finally:
        c.unassign()
