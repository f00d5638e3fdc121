"""Index job: a keyed dataset's topic partition -> its as-of index in the hangar."""

from __future__ import annotations

from fennel_dagster.engine.jobs.common import decode_rows
from fennel_dagster.engine.messages import InMessage, Iteration
from fennel_dagster.ops import index
from fennel_dagster.ops.state import StateReader, WriteBatch
from fennel_dagster.wire import plan


class IndexJob:
    stateful = True

    def __init__(self, job: plan.IndexJobSpec) -> None:
        self.name = job.name
        self.dataset = job.dataset
        self.topic = job.input_topic

    def input_partitions(self, partition: int) -> list[tuple[str, int]]:
        return [(self.topic, partition)]

    def process(self, messages: list[InMessage], state: StateReader) -> Iteration:
        rows, deleted, errors = decode_rows(messages, self.dataset.fields, self.dataset.name)
        wb = WriteBatch()
        if not rows.empty:
            index.upsert(self.dataset, rows, wb, deleted)
        return Iteration(errors=errors, writes=wb)
