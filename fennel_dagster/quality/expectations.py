"""Run a dataset's ``@expectations`` with great-expectations on a sample of its rows.

The sample is the newest committed rows of the dataset's topic (what the engine wrote);
each expectation's result keeps great-expectations' own details (unexpected counts and
values), so a failing check says which rows broke which rule.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from confluent_kafka import Consumer, TopicPartition

from fennel_dagster.errors import ExecutionError
from fennel_dagster.ops.batches import rows_of
from fennel_dagster.ops.rows import from_records
from fennel_dagster.wire import spec


@dataclass
class ExpectationResult:
    expectation: str
    kwargs: dict[str, Any]
    success: bool
    details: dict[str, Any] = field(default_factory=dict)


def _class_name(kind: str) -> str:
    return "".join(part.capitalize() for part in kind.split("_"))


def run(expectations: Sequence[spec.ExpectationSpec], df: pd.DataFrame) -> list[ExpectationResult]:
    import great_expectations as gx  # seconds to import: only checks that run pay for it

    ctx = gx.get_context(mode="ephemeral")
    batch = (
        ctx.data_sources.add_pandas("fennel")
        .add_dataframe_asset("sample")
        .add_batch_definition_whole_dataframe("all")
        .get_batch(batch_parameters={"dataframe": df})
    )
    out = []
    for e in expectations:
        kwargs = {k: list(v) if isinstance(v, tuple) else v for k, v in e.kwargs}
        cls = getattr(gx.expectations, _class_name(e.type), None)
        if cls is None:
            out.append(ExpectationResult(e.type, kwargs, False, {
                "error": f"great-expectations has no expectation {e.type!r}; fix its name"}))  # fmt: skip
            continue
        res = batch.validate(cls(**kwargs))
        details = {
            k: v for k, v in dict(res.result).items() if k != "partial_unexpected_index_list"
        }
        out.append(ExpectationResult(e.type, kwargs, bool(res.success), details))
    return out


def sample(
    servers: str, topic: str, ds: spec.DatasetSpec, rows: int = 1000, read_timeout_s: float = 60.0
) -> pd.DataFrame:
    """The newest ``rows`` committed rows of a dataset topic (all partitions), read to the end
    of each: a slow first fetch is waited for, not taken for an empty topic."""
    c = Consumer({"bootstrap.servers": servers, "group.id": "fennel-expectations",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "enable.partition.eof": True})  # fmt: skip
    try:
        md = c.list_topics(topic, timeout=10).topics.get(topic)
        if md is None or not md.partitions:
            return from_records([], ds.fields)
        parts = sorted(md.partitions)
        tps = []
        for p in parts:
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            tps.append(TopicPartition(topic, p, max(lo, hi - rows // len(parts) - 1)))
        c.assign(tps)
        records: list[dict[str, Any]] = []
        eof: set[int] = set()
        deadline = time.monotonic() + read_timeout_s
        while len(eof) < len(parts):
            m = c.poll(1.0)
            if m is None:
                if time.monotonic() > deadline:  # judging part of the sample would mislead
                    raise ExecutionError(
                        f"expectations of dataset {ds.name!r}: topic {topic!r} gave no end of "
                        f"partitions {sorted(set(parts) - eof)} within {read_timeout_s:g} s; "
                        "the check was not evaluated (is the broker up and not overloaded?)"
                    )
                continue
            if m.error():
                eof.add(m.partition() or 0)
                continue
            value = m.value()
            if value is not None:  # a tombstone is no row
                records += rows_of(value, ds.fields)
        return from_records(records[-rows:], ds.fields)
    finally:
        c.close()
