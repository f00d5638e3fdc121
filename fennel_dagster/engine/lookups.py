"""Routing a lookup to the engine partition whose state serves it.

The compiler names exactly one serving job per looked-up dataset (``plan.serves_dataset``);
keys go to that job's partitions by the dataset's key values, the same rule producers use
(``engine.partitioning``). The answer itself is ``query.lookup.lookup_state``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from fennel_dagster.engine.partitioning import key_bytes, partition_for
from fennel_dagster.metadata.registry import JobRow
from fennel_dagster.ops.rows import to_records
from fennel_dagster.ops.state import StateReader
from fennel_dagster.query.lookup import (
    LookupFailed,
    dataset_not_found,
    lookup_state,
    lookup_state_records,
)
from fennel_dagster.wire import plan


def serving_job(jobs: Sequence[JobRow], dataset: str) -> JobRow:
    """The job whose state answers lookups of ``dataset`` (among one branch's jobs)."""
    for j in jobs:
        if plan.serves_dataset(j.spec) == dataset:
            return j
    if not any(j.spec.dataset.name == dataset for j in jobs):
        raise dataset_not_found(dataset)
    raise LookupFailed(
        f"dataset {dataset} cannot be looked up: it has no index; declare it "
        "@dataset(index=True) with key fields, and commit"
    )


def partitions_of(job: JobRow, keys: pd.DataFrame) -> list[int]:
    return partitions_of_records(job, to_records(keys, list(job.spec.dataset.keys)))


def partitions_of_records(job: JobRow, keys: Sequence[dict[str, Any]]) -> list[int]:
    """The partition of each key record (JSON values of the dataset's key fields)."""
    if job.partitions == 1:  # every key is in partition 0: no key to encode and hash
        return [0] * len(keys)
    names = job.spec.dataset.keys
    return [partition_for(key_bytes([r[k] for k in names]), job.partitions) for r in keys]


def answer(
    state: StateReader,
    job: JobRow,
    keys: pd.DataFrame,
    ts: pd.Series,
    fields: list[str] | None = None,
) -> tuple[pd.DataFrame, pd.Series]:
    return lookup_state(state, job.spec.dataset, _serves(job), keys, ts, fields)


def answer_records(
    state: StateReader,
    job: JobRow,
    keys: list[dict[str, Any]],
    stamps_us: list[int],
    fields: list[str] | None = None,
) -> tuple[list[dict[str, Any]], list[bool]]:
    """``answer`` as JSON records, the lookup endpoint's reply."""
    return lookup_state_records(state, job.spec.dataset, _serves(job), keys, stamps_us, fields)


def _serves(job: JobRow) -> plan.AggregateServing | None:
    return job.spec.serves if isinstance(job.spec, plan.PipelineJobSpec) else None
