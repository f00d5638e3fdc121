"""The Kafka clients a runner uses, configured for exactly-once in one place.

Consumers read ``read_committed`` and never commit offsets themselves (offsets go into the
producer's transaction); producers are idempotent and transactional with a stable
``transactional.id`` per job partition, so a restarted runner fences the old one.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient

from fennel_dagster.engine.failures import Fenced, RecoveryError
from fennel_dagster.engine.messages import InMessage
from fennel_dagster.settings import Settings

# produce() after a fencing reports only "fatal"; all of these mean: a newer runner owns it
FENCED_CODES = {
    getattr(KafkaError, name)
    for name in (
        "_FENCED",
        "_FATAL",
        "PRODUCER_FENCED",
        "INVALID_PRODUCER_EPOCH",
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    )
    if hasattr(KafkaError, name)
}


def consumer(settings: Settings, group: str, **extra: Any) -> Consumer:
    conf = {
        "bootstrap.servers": settings.kafka_servers,
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": settings.engine_fetch_wait_ms,
        "fetch.min.bytes": 1,
        **extra,
    }
    return Consumer(conf)


def transactional_producer(settings: Settings, txn_id: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": settings.kafka_servers,
            "transactional.id": txn_id,
            "enable.idempotence": True,
            "linger.ms": 2,
            "transaction.timeout.ms": 60_000,
            "message.max.bytes": 10_000_000,
        }
    )


def fence(settings: Settings, txn_ids: list[str]) -> None:
    """Fence whatever runner last held each transactional id: ``init_transactions`` bumps the
    id's epoch and aborts its open transaction; the producer is then let go unused."""
    for txn_id in txn_ids:
        producer = transactional_producer(settings, txn_id)
        try:
            producer.init_transactions(60)
        except KafkaException as e:
            raise Fenced(f"{txn_id}: could not fence it: {e}") from e
        finally:
            producer.flush(0)
            del producer


def topic_partitions(
    settings: Settings,
    topic: str,
    job: str,
    wait_s: float = 60,
    stop: threading.Event | None = None,
) -> int:
    """The partition count of ``topic``, waiting up to ``wait_s`` for it to appear (or until
    ``stop``: a runner told to stop, or whose job was removed, does not wait out the minute)."""
    admin = AdminClient({"bootstrap.servers": settings.kafka_servers})
    deadline = time.monotonic() + wait_s
    stop = stop or threading.Event()
    while True:
        md = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and md.partitions:
            return len(md.partitions)
        if time.monotonic() > deadline or stop.is_set():
            raise RecoveryError(
                f"job {job}: input topic {topic!r} does not exist; create it "
                "(or produce to it) and the runner will start"
            )
        stop.wait(1)


def topic_missing(client: Consumer, topic: str, timeout: float = 5.0) -> bool:
    """Whether the broker says ``topic`` does not exist (False when it cannot be asked: an
    unreachable broker is waited out by the caller's own timeouts, not taken for a delete)."""
    try:
        md = client.list_topics(topic, timeout=timeout).topics.get(topic)
    except KafkaException:
        return False
    return md is None or (md.error is not None
                          and md.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART)  # fmt: skip


def in_message(msg: Message) -> InMessage:
    """The message as a named tuple made by ``tuple.__new__``: the named tuple's own
    constructor is a Python function, a third of this call's cost on a source's batch."""
    ts = msg.timestamp()
    return _new_tuple(InMessage, (msg.topic() or "", msg.partition() or 0, msg.offset() or 0,
                                  msg.key(), msg.value(), ts[1] if ts else 0))  # fmt: skip


_new_tuple = tuple.__new__


def lag(c: Consumer) -> int | None:
    """Messages between ``c``'s positions and the ends of its assigned partitions (a broker
    round trip: ask every few seconds). None (unknown) while a partition has no position
    yet — before its first fetch: a runner that has not read is not caught up, whatever
    the end — or when the broker cannot be reached (the consumer's loop meets that)."""
    try:
        behind = 0
        for tp in c.position(c.assignment()):
            if tp.offset < 0:  # not fetched yet (a fetch, even of nothing, gives a position)
                return None
            _, high = c.get_watermark_offsets(tp, timeout=1.0, cached=False)
            behind += max(0, high - tp.offset)
        return behind
    except KafkaException:
        return None
