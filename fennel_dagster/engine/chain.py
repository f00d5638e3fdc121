"""A chain: a source partition and its pipeline's same partition fused (``chaining`` says
which), in one thread and one Kafka transaction a batch.

Each job keeps what it has alone: its state (hangar, snapshots), its replaylog, its consumer
group and offsets. In one transaction the source's rows go to the dataset topic; once the
producer has them delivered, their offsets are known, and the pipeline runs on those very
messages (decoded as a replay from the topic would decode them), writes its outputs, and
records them as its input range: the pipeline's next runner, fused or not, goes on from
them. Then both replaylog markers and both groups' offsets, one commit, both hangars.

A pipeline behind the topic (it was added later, or ran alone before) reads it from Kafka in
these same transactions while the source writes on; when its consumer reaches the end of
the topic's partition past everything the chain wrote, the partition is paused for it and
the source's rows are handed over in memory from the next batch on.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from fennel_dagster.engine import kafka_clients
from fennel_dagster.engine.chaining import chain_txn_id
from fennel_dagster.engine.checkpoint import Checkpoint, committing
from fennel_dagster.engine.failures import Fenced, StopRequested
from fennel_dagster.engine.hangar import Hangar
from fennel_dagster.engine.messages import InMessage
from fennel_dagster.engine.recovery import open_state
from fennel_dagster.engine.rocks_tuning import RocksTuning
from fennel_dagster.engine.runner import IDLE_POLL_S, Runner, by_partition
from fennel_dagster.metadata.registry import JobRow
from fennel_dagster.settings import Settings
from fennel_dagster.wire import plan

log = logging.getLogger("fennel_dagster.engine.chain")

TP = tuple[str, int]
# how close behind the link a pipeline is when its source waits for it to read the rest
CATCH_UP_MESSAGES = 16
# a chain's batch takes up to this many source batches of raw messages: alone, a pipeline
# gathers several of its source's batch messages into one batch of its own (a backlog's
# pipeline batches held about four: bench/README.md), and its cost per row falls with size
CHAIN_BATCHES = 4


class ChainRunner:
    def __init__(
        self,
        settings: Settings,
        source: JobRow,
        pipe: JobRow,
        partition: int,
        owner: str,
        stop: threading.Event | None = None,
    ) -> None:
        self.settings = settings
        self.up = Runner(settings, source, partition, owner, stop=stop)
        self.down = Runner(settings, pipe, partition, owner, stop=stop)
        self.partition = partition
        self.txn_id = chain_txn_id(source.name, partition)
        assert isinstance(self.up.spec, plan.SourceJobSpec), source.name
        self.link: TP = (self.up.spec.output_topic, partition)  # the rows handed over
        self.handing = False  # the pipeline has read the link to its end: rows go in memory
        self.link_end = 0  # where the link partition ended when the chain started
        self.link_last: int | None = None  # the last row message the chain wrote to it
        self.link_read = -1  # the last link message the pipeline has taken
        self.eof_at = -1  # where the pipeline's consumer last found the link's end

    @property
    def runners(self) -> tuple[Runner, Runner]:
        return self.up, self.down

    def run(self, stop: threading.Event, heartbeat: Callable[[], None] | None = None) -> None:
        producer = kafka_clients.transactional_producer(self.settings, self.txn_id)
        try:
            producer.init_transactions(60)  # fences the chain's older runner
        except KafkaException as e:
            raise Fenced(f"{self.txn_id}: init_transactions failed: {e}") from e
        kafka_clients.fence(self.settings, [self.up.txn_id, self.down.txn_id])  # runners alone
        with self._opened() as (hangars, consumers):
            up_c, down_c = consumers
            try:
                up_c.assign(self.up.recover(hangars[0], up_c))
                starts = self.down.recover(hangars[1], down_c)
            except StopRequested:  # told to stop while recovering: a clean stop
                log.info("%s: stopped during recovery", self.txn_id)
                return
            down_c.assign(starts)
            at = next((tp.offset for tp in starts if (tp.topic, tp.partition) == self.link), -1)
            self.link_read = at - 1 if at >= 0 else -1
            _, self.link_end = down_c.get_watermark_offsets(
                TopicPartition(*self.link), timeout=30, cached=False
            )
            for runner in self.runners:
                runner.log_started(f" in chain {self.txn_id}")
            self._loop(stop, heartbeat, producer, consumers, hangars)
            for runner, hangar in zip(self.runners, hangars, strict=True):
                runner.snapshotter.join()
                if runner.snapshot_on_stop and runner.keep_state():
                    runner.snapshotter.now(hangar)

    @contextmanager
    def _opened(self) -> Iterator[tuple[tuple[Hangar, Hangar], tuple[Consumer, Consumer]]]:
        tuning = RocksTuning.of(self.settings)
        opened: list[Hangar] = []
        consumers: list[Consumer] = []
        try:
            for runner in self.runners:
                hangar, runner.stats.restored_snapshot = open_state(
                    runner.store, runner.path, runner.job.name, self.partition, tuning
                )
                opened.append(hangar)
            consumers.append(kafka_clients.consumer(self.settings, self.up.group))
            consumers.append(  # its end of the link is told by an end-of-partition event
                kafka_clients.consumer(
                    self.settings, self.down.group, **{"enable.partition.eof": True}
                )
            )
            yield (opened[0], opened[1]), (consumers[0], consumers[1])
        finally:
            for c in consumers:
                c.close()
            for runner in self.runners:
                runner.snapshotter.settle()
            for hangar in opened:
                hangar.close()

    def _loop(
        self,
        stop: threading.Event,
        heartbeat: Callable[[], None] | None,
        producer: Producer,
        consumers: tuple[Consumer, Consumer],
        hangars: tuple[Hangar, Hangar],
    ) -> None:
        up_c, down_c = consumers
        last_beat = 0.0
        linger = self.settings.engine_txn_interval_ms / 1000
        most = self.settings.engine_batch_size
        while not stop.is_set():
            now = time.monotonic()
            if heartbeat is not None and now - last_beat > 2.0:
                self.up.measure_lag(up_c)
                self.down.measure_lag(down_c)
                if self.handing and self._link_grew(down_c):
                    self._read_link_again(down_c)
                heartbeat()
                last_beat = now
            # A pipeline a few messages behind the link takes the rest before the source
            # writes more (else, a batch behind, it would never catch the source up); one
            # further behind reads on (up to a batch a time) while the source writes (one
            # message a time), so it closes in.
            waits = not self.handing and self._link_behind() <= CATCH_UP_MESSAGES
            # the pipeline's own inputs first (the repartition topic, joined datasets, the
            # link while it is behind), without waiting unless the source waits; then the
            # source's, as a runner's
            down = self._usable(down_c.consume(most, IDLE_POLL_S if waits else 0))
            if not self.handing and self._caught_up(down):
                self.handing = True  # from the next batch of the source on
                if self.link_last is None:  # read to its end: all below it taken or markers
                    self.link_read = max(self.link_read, self.eof_at - 1)
                down_c.pause([TopicPartition(*self.link)])
                log.info("%s: %s has read %s[%d] to its end; handing rows over",
                         self.txn_id, self.down.job.name, *self.link)  # fmt: skip
                waits = False
            up: list[Message] = []
            if not waits:
                first = up_c.poll(0 if down else IDLE_POLL_S)
                if first is not None:
                    up = self._usable([first, *up_c.consume(most * CHAIN_BATCHES - 1, linger)])
            if up or down:
                self._iterate(producer, consumers, hangars, up, down)
            for runner, hangar in zip(self.runners, hangars, strict=True):
                runner.snapshotter.tick(hangar)

    def _next_after_taken(self, rows: list[InMessage]) -> bool:
        """Whether ``rows`` (the chain's, just written to the link) follow what the pipeline
        has taken with nothing in between but the chain's own commit marker: the link has no
        other writer when a dataset has one source, but a row written there by hand must not
        be skipped by a pipeline that takes rows in memory."""
        offsets = [m.offset for m in rows]
        if offsets != list(range(offsets[0], offsets[0] + len(offsets))):
            return False
        after_ours = self.link_read == self.link_last and offsets[0] == self.link_read + 2
        return offsets[0] == self.link_read + 1 or after_ours

    def _link_grew(self, down_c: Consumer) -> bool:
        """Whether the link ends past what the pipeline has taken (and the chain's marker):
        rows someone else wrote there, which a pipeline taking rows in memory never sees."""
        try:
            _, high = down_c.get_watermark_offsets(TopicPartition(*self.link), timeout=5,
                                                   cached=False)  # fmt: skip
        except KafkaException:
            return False  # the broker is away: the loop meets that itself
        ours = self.link_read == self.link_last
        return int(high) > self.link_read + (2 if ours else 1)

    def _read_link_again(self, down_c: Consumer) -> None:
        """Stop handing rows over: the pipeline reads the link from what it has taken."""
        self.handing = False
        tp = TopicPartition(*self.link, self.link_read + 1)
        down_c.seek(tp)
        down_c.resume([tp])
        log.warning("%s: %s[%d] has rows the chain did not write; %s reads it from Kafka",
                    self.txn_id, *self.link, self.down.job.name)  # fmt: skip

    def _link_behind(self) -> int:
        """About how many messages of the link the pipeline has still to read."""
        end = self.link_last + 1 if self.link_last is not None else self.link_end
        return max(0, end - (self.link_read + 1))

    def _usable(self, msgs: list[Message]) -> list[Message]:
        """The data messages among ``msgs`` (a link message the pipeline has taken already,
        fetched before the hand-over paused it, dropped); notes where the link ended."""
        out = []
        for m in msgs:
            err = m.error()
            on_link = (m.topic(), m.partition()) == self.link
            if err is None:
                if not (on_link and (m.offset() or 0) <= self.link_read):
                    out.append(m)
            elif err.code() == KafkaError._PARTITION_EOF:
                if on_link:
                    self.eof_at = max(self.eof_at, m.offset() or 0)
            else:
                log.warning("%s: consume error %s", self.txn_id, err)
        return out

    def _caught_up(self, down_msgs: list[Message]) -> bool:
        """Whether the pipeline, with ``down_msgs``, has taken every row the link holds: the
        last one the chain wrote (no one else writes the link), or, before the chain wrote
        any, up to where the link ended when it started."""
        taken = [m.offset() or 0 for m in down_msgs if (m.topic(), m.partition()) == self.link]
        if taken:
            self.link_read = max(self.link_read, max(taken))
        if self.link_last is not None:
            return self.link_read >= self.link_last
        return self.eof_at >= self.link_end

    def _iterate(
        self,
        producer: Producer,
        consumers: tuple[Consumer, Consumer],
        hangars: tuple[Hangar, Hangar],
        up_msgs: list[Message],
        down_msgs: list[Message],
    ) -> None:
        started = time.monotonic()
        up_c, down_c = consumers
        handing = self.handing
        up_cp = self._checkpoint(producer, up_c, hangars[0], self.up, self.link)
        down_cp = self._checkpoint(producer, down_c, hangars[1], self.down, None)
        handed: list[InMessage] = []
        with committing(producer, self.txn_id, lambda: self._seal(up_cp, down_cp)):
            for group in by_partition(up_msgs).values():
                up_cp.stage(group, self.up.process(group, up_cp.reader))
            for group in by_partition(down_msgs).values():
                down_cp.stage(group, self.down.process(group, down_cp.reader))
            if handing and up_cp.counts.by_topic.get(self.link[0]):
                rows = up_cp.delivered_in_order()
                if self._next_after_taken(rows):
                    handed = rows
                    down_cp.stage(handed, self.down.process(handed, down_cp.reader))
                else:  # another writer's rows are in between: the pipeline reads them
                    self._read_link_again(down_c)
        if up_msgs:
            up_cp.apply()
            self.up.account(up_cp, len(up_msgs), started)
        if down_msgs or handed:
            down_cp.apply()
            self.down.account(down_cp, len(down_msgs) + len(handed), started)
        written = up_cp.delivered_in_order() if not handed else handed  # all delivered now
        if written:
            self.link_last = written[-1].offset
        if handed:
            self.down.metrics.handed.labels(self.down.job.name, str(self.partition)).inc(
                len(handed)
            )
            self.link_read = handed[-1].offset
            with contextlib.suppress(KafkaException):  # the position its lag is measured from
                down_c.seek(TopicPartition(*self.link, handed[-1].offset + 1))

    def _checkpoint(
        self, producer: Producer, consumer: Consumer, hangar: Hangar, runner: Runner,
        tracked: TP | None,
    ) -> Checkpoint:  # fmt: skip
        spec = runner.spec
        return Checkpoint(producer, consumer, hangar, self.partition, spec.error_topic,
                          spec.replaylog, self.txn_id, tracked)  # fmt: skip

    @staticmethod
    def _seal(up: Checkpoint, down: Checkpoint) -> None:
        for cp in (up, down):
            if cp.counts.ranges:  # a job with no input this batch records nothing
                cp.seal()
