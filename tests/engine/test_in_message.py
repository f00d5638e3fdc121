"""A consumed message becomes the named tuple its own constructor makes
(``engine.kafka_clients.in_message`` builds it with ``tuple.__new__``)."""

from __future__ import annotations

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Message

from fennel_dagster.engine.kafka_clients import in_message
from fennel_dagster.engine.messages import InMessage


def test_a_message_is_the_named_tuple_its_constructor_makes() -> None:
    got = in_message(Message(topic="t", partition=2, offset=5, key=b"k", value=b"v",
                             timestamp=(1, 17)))  # fmt: skip
    assert got == InMessage("t", 2, 5, b"k", b"v", 17)
    assert type(got) is InMessage
    assert (got.topic, got.partition, got.offset, got.timestamp_ms) == ("t", 2, 5, 17)
    assert got._replace(value=None).value is None


def test_a_tombstone_without_a_timestamp() -> None:
    got = in_message(Message(topic="t", partition=0, offset=0, key=None, value=None,
                             timestamp=(TIMESTAMP_NOT_AVAILABLE, -1)))  # fmt: skip
    assert got == InMessage("t", 0, 0, None, None, -1)
