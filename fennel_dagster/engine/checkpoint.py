"""One batch of a job partition, committed exactly once.

In ONE Kafka transaction: the batch's outputs, its error records, a marker in the job's
replaylog naming the input ranges (in order), and the consumed offsets. After the commit,
the state mutations go to the hangar together with those offsets and the marker's offset in
one atomic write. A crash before the commit loses nothing (the transaction is aborted by the
next runner's fencing); a crash after it is repaired by replaying the marker (``recovery``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from fennel_dagster.engine.error_records import encode_error
from fennel_dagster.engine.failures import Fenced
from fennel_dagster.engine.faults import maybe_crash
from fennel_dagster.engine.hangar import Hangar
from fennel_dagster.engine.kafka_clients import FENCED_CODES, in_message
from fennel_dagster.engine.messages import InMessage, Iteration, newest
from fennel_dagster.ops.state import OverlayReader, WriteBatch

Range = tuple[str, int, int, int]  # topic, partition, first offset, last offset


@dataclass
class BatchCounts:
    outputs: int = 0
    errors: int = 0
    late: int = 0
    newest_event_us: int | None = None
    by_topic: dict[str, int] = field(default_factory=dict)  # output rows per topic
    ranges: list[Range] = field(default_factory=list)


class Checkpoint:
    """Stage a batch's results with ``stage``, inside ``transaction()``; then ``apply()``."""

    def __init__(
        self,
        producer: Producer,
        consumer: Consumer,
        hangar: Hangar,
        partition: int,
        error_topic: str | None,
        replaylog: str | None,
        txn_id: str,
        tracked: tuple[str, int] | None = None,
    ) -> None:
        """``tracked``: a topic partition whose records' offsets are wanted once they are
        delivered (``delivered``: a chain hands them to its pipeline, ``engine.chain``)."""
        self.tracked = tracked
        self.delivered: list[InMessage] = []
        self._delivery_error: KafkaError | None = None
        self.producer = producer
        self.consumer = consumer
        self.hangar = hangar
        self.partition = partition
        self.error_topic = error_topic
        self.replaylog = replaylog
        self.txn_id = txn_id
        self.pending = WriteBatch()
        self.reader = OverlayReader(hangar, self.pending)  # the batch sees its own writes
        self.counts = BatchCounts()
        self._marker_offset: int | None = None

    @contextmanager
    def transaction(self) -> Iterator[Checkpoint]:
        """Begin; on leaving the block, produce the marker and offsets and commit."""
        with committing(self.producer, self.txn_id, self.seal):
            yield self

    def stage(self, group: list[InMessage], it: Iteration) -> None:
        """One input topic-partition's messages and what the job made of them."""
        if it.writes is not None:
            self.pending.update(it.writes)
        for rec in it.outputs:
            if (rec.topic, rec.partition) == self.tracked:
                self.producer.produce(rec.topic, rec.value, rec.key, partition=rec.partition,
                                      on_delivery=self._on_tracked)  # fmt: skip
            else:
                self.producer.produce(rec.topic, rec.value, rec.key, partition=rec.partition)
            self.counts.by_topic[rec.topic] = self.counts.by_topic.get(rec.topic, 0) + rec.rows
        if it.errors and self.error_topic:
            for err in it.errors:
                self.producer.produce(self.error_topic, encode_error(err), partition=0)
            self.counts.errors += len(it.errors)
        self.counts.outputs += sum(r.rows for r in it.outputs)
        self.counts.late += it.late
        self.counts.newest_event_us = newest(self.counts.newest_event_us, it.newest_event_us)
        first, last = group[0], group[-1]
        self.counts.ranges.append((first.topic, first.partition, first.offset, last.offset))
        self.producer.poll(0)

    def delivered_in_order(self) -> list[InMessage]:
        """The tracked records, delivered (the producer flushed), in offset order."""
        self.producer.flush(60)
        if self._delivery_error is not None:
            raise KafkaException(self._delivery_error)
        return sorted(self.delivered, key=lambda m: m.offset)

    def seal(self) -> None:
        """Into the open transaction: the replaylog marker and the consumed offsets."""
        ranges = self.counts.ranges
        if self.replaylog is not None:
            marker = {"p": self.partition, "ranges": [list(r) for r in ranges]}
            self.producer.produce(self.replaylog, json.dumps(marker).encode(), partition=0,
                                  on_delivery=self._on_marker)  # fmt: skip
        maybe_crash("mid_batch")
        offsets = [TopicPartition(t, p, b + 1) for t, p, _, b in ranges]
        metadata = self.consumer.consumer_group_metadata()
        self.producer.send_offsets_to_transaction(offsets, metadata, 30)

    def apply(self) -> None:
        """After the commit: the state mutations with the offsets they reflect, at once."""
        maybe_crash("after_commit")
        self.producer.poll(0)  # delivers the marker's offset
        offsets = {(t, p): b + 1 for t, p, _, b in self.counts.ranges}
        self.hangar.apply(self.pending, offsets, self._marker_offset)

    def _on_marker(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self._marker_offset = msg.offset()

    def _on_tracked(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self._delivery_error = err
        else:
            self.delivered.append(in_message(msg))


@contextmanager
def committing(producer: Producer, txn_id: str, seal: Callable[[], None]) -> Iterator[None]:
    """One Kafka transaction around the block: begun, then ``seal`` (markers, offsets) and
    committed; a fencing becomes ``Fenced``, an abortable error aborts and is raised."""
    try:
        producer.begin_transaction()
        yield
        seal()
        producer.commit_transaction(60)
    except KafkaException as e:
        cause = e.args[0] if e.args else None
        if isinstance(cause, KafkaError) and (cause.fatal() or cause.code() in FENCED_CODES):
            raise Fenced(f"{txn_id}: fenced by a newer runner ({cause})") from e
        if isinstance(cause, KafkaError) and cause.txn_requires_abort():
            producer.abort_transaction(30)
        raise
