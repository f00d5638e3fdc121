"""Index job: a keyed dataset's topic partition -> its as-of index in the hangar."""

from __future__ import annotations

from typing import Any

from fennel_dagster.engine.jobs.common import dataset_of, decode_rows
from fennel_dagster.engine.messages import InMessage, Iteration
from fennel_dagster.ops import index
from fennel_dagster.ops.state import StateReader, WriteBatch


class IndexJob:
    stateful = True

    def __init__(self, name: str, spec: dict[str, Any]) -> None:
        self.name = name
        self.spec = spec
        self.dataset = dataset_of(spec["dataset"])
        self.topic = spec["inputs"][0]

    def input_partitions(self, partition: int) -> list[tuple[str, int]]:
        return [(self.topic, partition)]

    def process(self, messages: list[InMessage], state: StateReader) -> Iteration:
        rows, deleted, errors = decode_rows(messages, self.dataset.fields, self.dataset.name)
        wb = WriteBatch()
        if not rows.empty:
            index.upsert(self.dataset, rows, wb, deleted)
        return Iteration(errors=errors, writes=wb)
