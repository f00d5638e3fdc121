"""Kafka's transactions work on the stack's broker: the engine's exactly-once foundation."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from fennel_dagster.settings import Settings

pytestmark = pytest.mark.services


def _create_topic(admin: AdminClient, name: str, partitions: int) -> None:
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)


def _read_all(settings: Settings, topic: str, partitions: int, group: str) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": settings.kafka_servers,
            "group.id": group,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < 3:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            values.append(msg.value())
            idle_since = time.monotonic()
    consumer.close()
    return values


def _txn_producer(settings: Settings, txn_id: str) -> Producer:
    p = Producer({"bootstrap.servers": settings.kafka_servers, "transactional.id": txn_id})
    p.init_transactions(30)
    return p


def test_topic_is_created_with_requested_partitions(
    settings: Settings, kafka_admin: AdminClient, unique_name: str
) -> None:
    _create_topic(kafka_admin, unique_name, 6)
    meta = kafka_admin.list_topics(unique_name, timeout=10)
    assert len(meta.topics[unique_name].partitions) == 6
    kafka_admin.delete_topics([unique_name])[unique_name].result(timeout=30)


def test_read_committed_consumer_sees_committed_but_not_aborted_records(
    settings: Settings, kafka_admin: AdminClient, unique_name: str
) -> None:
    _create_topic(kafka_admin, unique_name, 3)
    producer = _txn_producer(settings, f"{unique_name}-txn")
    producer.begin_transaction()
    for i in range(10):
        producer.produce(unique_name, value=f"committed-{i}".encode(), partition=i % 3)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(unique_name, value=f"aborted-{i}".encode(), partition=i % 3)
    producer.flush(30)  # the aborted records really reach the log before the abort
    producer.abort_transaction(30)

    seen = _read_all(settings, unique_name, 3, f"{unique_name}-reader")
    assert sorted(seen) == sorted(f"committed-{i}".encode() for i in range(10))


def test_send_offsets_to_transaction_moves_the_group_offset_only_on_commit(
    settings: Settings, kafka_admin: AdminClient, unique_name: str
) -> None:
    source, sink, group = f"{unique_name}-in", f"{unique_name}-out", f"{unique_name}-grp"
    _create_topic(kafka_admin, source, 1)
    _create_topic(kafka_admin, sink, 1)
    seed = Producer({"bootstrap.servers": settings.kafka_servers})
    for i in range(5):
        seed.produce(source, value=str(i).encode())
    seed.flush(30)

    consumer = Consumer(
        {
            "bootstrap.servers": settings.kafka_servers,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(source, 0, 0)])
    batch = []
    while len(batch) < 5:
        msg = consumer.poll(5)
        assert msg is not None and msg.error() is None
        batch.append(msg)

    producer = _txn_producer(settings, f"{unique_name}-pipe")

    def pipe(commit: bool) -> None:
        producer.begin_transaction()
        for m in batch:
            producer.produce(sink, value=m.value())
        offsets = [TopicPartition(source, 0, batch[-1].offset() + 1)]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    def committed_offset() -> int:
        return consumer.committed([TopicPartition(source, 0)], timeout=10)[0].offset

    pipe(commit=False)
    assert committed_offset() < 0  # no committed offset: the aborted transaction moved nothing
    pipe(commit=True)
    assert committed_offset() == 5
    consumer.close()
    assert sorted(_read_all(settings, sink, 1, f"{unique_name}-check")) == [
        str(i).encode() for i in range(5)
    ]
