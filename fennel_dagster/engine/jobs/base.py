"""The contract between a runner and the logic of its job.

A runner owns one job partition: it asks the job which input topic-partitions it reads,
feeds it batches of messages with a read-only view of its state, and commits what comes
back. ``process`` must be deterministic in (messages, state): recovery replays the same
batches into state only, and must reach the same state.
"""

from __future__ import annotations

from typing import Protocol

from fennel_dagster.engine.messages import InMessage, Iteration
from fennel_dagster.ops.state import StateReader


class JobLogic(Protocol):
    name: str
    stateful: bool

    def input_partitions(self, partition: int) -> list[tuple[str, int]]:
        """The (topic, partition) pairs job partition ``partition`` consumes."""
        ...

    def process(self, messages: list[InMessage], state: StateReader) -> Iteration:
        """One iteration on a batch from one input topic-partition."""
        ...
