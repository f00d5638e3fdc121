"""Rows logged to a webhook, written to its inbox topics by the query server's Kafka producer.

One long-lived producer serves every log, and librdkafka keeps what it learnt of a topic. An
inbox topic deleted (its branch or dataset deleted) and seen missing for 30 s is marked
non-existent; a produce to it then fails at once with ``Unknown topic`` until the next
periodic metadata refresh (``topic.metadata.refresh.interval.ms``, 5 minutes), also after a
commit created the topic again. So rows refused, or failed on delivery, for an unknown
topic or partition make the writer ask Kafka afresh (an admin metadata request): a topic
that exists with the partitions the commit gave it gets those rows through a new producer,
at most ``ATTEMPTS`` producers a log; one that does not is the caller's error, naming the
webhook and the fix. A replaced producer's queued rows are purged: other logs waiting on
them hand them to the new producer, and rows of a refused log never arrive later.
Every row's delivery is awaited and counted: a row Kafka refused is never reported accepted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from prometheus_client import Counter

from fennel_dagster.errors import FennelError
from fennel_dagster.serve.frames import BadRequest

ACK_S = 30.0  # each attempt's wait for Kafka to acknowledge every row
PROBE_S = 3.0  # rows unanswered this long: ask Kafka whether their topics exist
ATTEMPTS = 3  # producers tried per log (the first, then fresh ones)
MESSAGE_MAX_BYTES = 1_000_000  # the producer's message.max.bytes (librdkafka's default)
# a row's JSON plus the record's own framing must fit message.max.bytes
ROW_MAX_BYTES = MESSAGE_MAX_BYTES - 1_024
_UNKNOWN = frozenset({
    KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART,
})  # fmt: skip
_TOO_LARGE = frozenset({KafkaError.MSG_SIZE_TOO_LARGE})
_PURGED = frozenset({KafkaError._PURGE_QUEUE})
PRODUCERS = Counter(
    "fennel_query_server_inbox_producers",
    "Kafka producers made for logged rows: the first, then one for each replaced because "
    "its metadata of an inbox topic went stale (a deleted topic created again)",
)


class InboxUnavailable(FennelError):
    """Kafka did not take a log's rows in time (or could not be asked): answered 503, the
    caller retries."""


class InboxMissing(BadRequest):
    """A webhook whose inbox topic is not in Kafka (its dataset or branch deleted, or a
    commit not done creating it): the caller's 4xx."""


@dataclass(frozen=True)
class Row:
    topic: str
    partition: int
    value: bytes
    index: int  # the row's position in the request


@dataclass
class _Deliveries:
    """One attempt's rows handed to a producer, and what Kafka answered for each."""

    pending: int = 0
    failed: list[tuple[Row, KafkaError]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.done.set()

    def handing(self) -> None:
        with self.lock:
            self.pending += 1
            self.done.clear()

    def answered(self, row: Row, err: KafkaError | None) -> None:
        with self.lock:
            if err is not None:
                self.failed.append((row, err))
            self.pending -= 1
            if self.pending == 0:
                self.done.set()

    def callback(self, row: Row):  # type: ignore[no-untyped-def]
        return lambda err, _msg: self.answered(row, err)


class InboxWriter:
    def __init__(self, kafka_servers: str) -> None:
        self._servers = kafka_servers
        self._lock = threading.Lock()
        self._generation: tuple[int, Producer] | None = None
        self._admin: AdminClient | None = None

    def _producer(self) -> tuple[int, Producer]:
        with self._lock:
            if self._generation is None:
                self._generation = (1, self._new_producer())
            return self._generation

    def _new_producer(self) -> Producer:
        PRODUCERS.inc()
        return Producer({"bootstrap.servers": self._servers, "enable.idempotence": True,
                         "linger.ms": 2, "message.max.bytes": MESSAGE_MAX_BYTES})  # fmt: skip

    def _retire(self, seen: int) -> None:
        """Replace the producer of generation ``seen`` (unless another log did) and purge
        its queued rows: their logs hand them to the new one."""
        with self._lock:
            if self._generation is None or self._generation[0] != seen:
                return
            old = self._generation[1]
            self._generation = (seen + 1, self._new_producer())
        old.purge(in_queue=True, in_flight=False, blocking=False)
        old.poll(0)

    def close(self, timeout: float = 10.0) -> None:
        with self._lock:
            current, self._generation = self._generation, None
        if current is not None:
            current[1].flush(timeout)

    def write(
        self, webhook: str, endpoint: str, inboxes: Mapping[str, int], rows: Sequence[bytes]
    ) -> int:
        """Every row of ``rows`` (JSON bytes) into each inbox topic (topic -> partitions) of
        ``webhook.endpoint``, row ``i`` to partition ``i % partitions``; the rows accepted
        (all of them: anything less is an error)."""
        where = f"{webhook}.{endpoint}"
        for i, value in enumerate(rows):
            if len(value) > ROW_MAX_BYTES:
                raise BadRequest(
                    f"log to {where}: row {i} is {len(value)} bytes as JSON, over the "
                    f"{ROW_MAX_BYTES} bytes a Kafka message of the inbox holds; shrink its values"
                )
        todo = [Row(topic, i % parts, value, i)
                for topic, parts in inboxes.items() for i, value in enumerate(rows)]  # fmt: skip
        for _ in range(ATTEMPTS):
            seen, producer = self._producer()
            deliveries = _Deliveries()
            refused, fatal = self._hand(where, producer, deliveries, todo)
            self._await(webhook, endpoint, inboxes, seen, producer, deliveries, todo)
            again, stale = list(refused), bool(refused) or fatal
            for row, err in deliveries.failed:
                code = err.code()
                if code in _PURGED:  # its producer was replaced: the next one takes it
                    again.append(row)
                elif code in _UNKNOWN:
                    again.append(row)
                    stale = True
                elif code in _TOO_LARGE:
                    raise BadRequest(f"log to {where}: Kafka refused row {row.index} as too "
                                     f"large ({len(row.value)} bytes); shrink its values")  # fmt: skip
                else:
                    raise InboxUnavailable(f"log to {where}: Kafka refused row {row.index} "
                                           f"({err.str()}); retry the log")  # fmt: skip
            if not again:
                return len(rows)
            if stale:
                if not fatal:
                    self._require_topics(webhook, endpoint, {r.topic for r in again}, inboxes)
                self._retire(seen)  # its view of these topics is stale
            todo = sorted(again, key=lambda r: (r.topic, r.index))
        raise InboxUnavailable(
            f"log to {where}: Kafka kept answering unknown topic or partition for its inbox "
            f"({', '.join(sorted({r.topic for r in todo}))}) through {ATTEMPTS} producers; "
            f"{len(todo)} row(s) not written: retry the log"
        )

    def _hand(
        self, where: str, producer: Producer, deliveries: _Deliveries, todo: list[Row]
    ) -> tuple[list[Row], bool]:
        """Hand ``todo`` to ``producer``; the rows it refused at once for an unknown topic or
        partition (or a fatal producer error: every row from there), and whether it was fatal."""
        refused: list[Row] = []
        deadline = time.monotonic() + ACK_S
        for k, row in enumerate(todo):
            while True:
                deliveries.handing()
                try:
                    producer.produce(row.topic, row.value, partition=row.partition,
                                     on_delivery=deliveries.callback(row))  # fmt: skip
                    break
                except BufferError:  # the producer's queue is full: let it drain
                    deliveries.answered(row, None)
                    if time.monotonic() > deadline:
                        raise InboxUnavailable(
                            f"log to {where}: Kafka took no rows for {ACK_S:.0f} s (the "
                            "producer's queue stayed full); retry the log"
                        ) from None
                    producer.poll(0.05)
                except KafkaException as e:
                    deliveries.answered(row, None)
                    err: KafkaError = e.args[0]
                    if err.fatal():
                        return refused + todo[k:], True
                    if err.code() in _UNKNOWN:
                        refused.append(row)
                        break
                    if err.code() in _TOO_LARGE:
                        raise BadRequest(f"log to {where}: row {row.index} is too large for a "
                                         f"Kafka message ({err.str()}); shrink its values") from None  # fmt: skip
                    raise InboxUnavailable(f"log to {where}: Kafka refused row {row.index} "
                                           f"({err.str()}); retry the log") from None  # fmt: skip
        return refused, False

    def _await(
        self,
        webhook: str,
        endpoint: str,
        inboxes: Mapping[str, int],
        seen: int,
        producer: Producer,
        deliveries: _Deliveries,
        todo: list[Row],
    ) -> None:
        """Until Kafka answered every row handed over. Rows unanswered after ``PROBE_S``
        make Kafka be asked whether their topics exist: a missing one refuses the log at
        once (librdkafka would wait 30 s for the topic to appear) and retires the producer,
        so the rows it holds never arrive later."""
        start = time.monotonic()
        probed = False
        while not deliveries.done.is_set():
            waited = time.monotonic() - start
            if waited >= ACK_S:
                raise InboxUnavailable(
                    f"log to {webhook}.{endpoint}: Kafka did not acknowledge "
                    f"{deliveries.pending} of {len(todo)} row(s) in {ACK_S:.0f} s (they may "
                    "still arrive): check the dataset before logging them again"
                )
            if not probed and waited >= PROBE_S:
                probed = True
                try:
                    self._require_topics(webhook, endpoint, {r.topic for r in todo}, inboxes)
                except InboxMissing:
                    self._retire(seen)
                    raise
            producer.flush(min(ACK_S - waited, 0.5))  # serves delivery callbacks (ours too)
            deliveries.done.wait(0.005)

    def _require_topics(
        self, webhook: str, endpoint: str, topics: set[str], inboxes: Mapping[str, int]
    ) -> None:
        """Ask Kafka afresh: each topic exists with the partitions its commit gave it, or the
        log is refused naming the webhook and the fix."""
        where = f"{webhook}.{endpoint}"
        for topic in sorted(topics):
            found = self._partitions(where, topic)
            if found is None:
                raise InboxMissing(
                    f"webhook {where}: its inbox topic {topic} is not in Kafka (the dataset "
                    "reading it, or its branch, was deleted, or a commit is still creating "
                    f"it): commit a dataset with source Webhook(name={webhook!r})"
                    f".endpoint({endpoint!r}) and log again once the commit returned"
                )
            if found < inboxes[topic]:
                raise InboxMissing(
                    f"webhook {where}: its inbox topic {topic} has {found} partition(s) in "
                    f"Kafka, its commit made {inboxes[topic]} (the topic was replaced outside "
                    "the platform): delete the dataset and commit it again"
                )

    def _partitions(self, where: str, topic: str) -> int | None:
        with self._lock:
            if self._admin is None:
                self._admin = AdminClient({"bootstrap.servers": self._servers})
            admin = self._admin
        try:
            meta = admin.list_topics(topic=topic, timeout=10)
        except KafkaException as e:
            raise InboxUnavailable(
                f"log to {where}: Kafka did not answer whether topic {topic} exists "
                f"({e.args[0].str() if e.args else e}); retry the log"
            ) from None
        found = meta.topics.get(topic)
        if found is None or found.error is not None:
            return None
        return len(found.partitions)


__all__ = ["ACK_S", "ATTEMPTS", "InboxMissing", "InboxUnavailable", "InboxWriter"]
