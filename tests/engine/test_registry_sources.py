"""Avro and Protobuf Kafka sources, through the stack's schema registry and a real runner.

Values are written by confluent-kafka's own serializers against the registry (Apicurio's
Confluent-compatible API), as a producer of the user's would write them. Every good value
reaches the dataset's topic as its row; every value that carries no row (JSON bytes, an id
the registry does not know, a cut payload, a field of the wrong type) is in the error topic
with its stage and a reason; a registry that does not answer stops the batch, whole, until
it is back, and judges no row.
"""

from __future__ import annotations

import struct
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from fennel_dagster import dataset, meta, source, stack
from fennel_dagster.declare import commit_spec
from fennel_dagster.engine.error_records import decode_error
from fennel_dagster.engine.failures import ServiceUnavailable
from fennel_dagster.engine.isolation import process_isolating
from fennel_dagster.engine.jobs.protobuf_values import message_class
from fennel_dagster.engine.jobs.registry_client import Registry
from fennel_dagster.engine.jobs.registry_formats import decode_each
from fennel_dagster.engine.jobs.source import MAX_MESSAGE_BYTES, SourceJob
from fennel_dagster.engine.messages import InMessage
from fennel_dagster.engine.restarts import transient
from fennel_dagster.engine.runner import run_forever
from fennel_dagster.ops.batches import rows_of
from fennel_dagster.ops.state import MemoryState
from fennel_dagster.settings import Settings
from fennel_dagster.sources import Avro, Kafka, Protobuf
from fennel_dagster.wire import plan
from tests.engine.harness import Fleet, commit, create_topic, raw_records, read_topic, wait_for

pytestmark = pytest.mark.services
T0 = datetime(2026, 1, 1, tzinfo=UTC)

AVRO = """{"type": "record", "name": "Txn", "namespace": "test", "fields": [
  {"name": "uid", "type": "long"}, {"name": "amount", "type": "double"},
  {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["CARD", "CASH"]}},
  {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}"""
# the same record with amount as text: each row breaks the dataset's schema
AVRO_TEXT_AMOUNT = AVRO.replace('"type": "double"', '"type": "string"').replace("Txn", "Txn2")

PROTO = """syntax = "proto3";
package test;
import "google/protobuf/timestamp.proto";
message Other { string x = 1; }
message Txn {
  enum Kind { CARD = 0; CASH = 1; }
  int64 uid = 1;
  double amount = 2;
  Kind kind = 3;
  google.protobuf.Timestamp ts = 4;
}
"""


def _datasets(topic: str, fmt: Avro | Protobuf) -> list[Any]:
    @meta(owner="engine@example.com")
    @source(Kafka(name="events").topic(topic, format=fmt), disorder="1h", cdc="append")
    @dataset
    class Txn:
        uid: int
        amount: float
        kind: str
        ts: datetime

    return [Txn]


def _source_job(topic: str, fmt: Avro | Protobuf, partitions: int = 1) -> SourceJob:
    """The source job a runner would build for ``fmt`` on ``topic`` (no commit)."""
    ds = commit_spec("direct", _datasets(topic, fmt)).datasets[0]
    return SourceJob(plan.SourceJobSpec(
        name="direct", partitions=partitions, dataset=ds, source=ds.sources[0], output_topic="o",
        error_topic="e", replaylog="r", external_topic=topic), 1)  # fmt: skip


def _row(i: int) -> dict[str, Any]:
    return {"uid": i % 5, "amount": i + 0.5, "kind": "CASH" if i % 2 else "CARD",
            "ts": T0 + timedelta(minutes=i)}  # fmt: skip


def _ingest(
    s: Settings, topic: str, fmt: Avro | Protobuf, payloads: list[bytes]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows and error records a source runner makes of ``payloads``."""
    jobs = commit(s, _datasets(topic, fmt))
    src = jobs["source:Txn"]
    p = Producer({"bootstrap.servers": s.kafka_servers})
    for v in payloads:
        p.produce(topic, v, partition=0)
    assert p.flush(30) == 0
    fleet = Fleet(s, "registry-test")
    fleet.start(src, [0])
    runner = fleet.threads[0][2]
    try:
        wait_for(lambda: runner.stats.messages >= len(payloads) or bool(fleet.failures), 120,
                 "ingest")  # fmt: skip
    finally:
        fleet.stop()
    rows = [r for _, _, r in read_topic(s, src.spec.output_topic, 1)]
    errors = [decode_error(v) for v in raw_records(s, src.spec.error_topic)]
    return rows, errors


def _expected(i: int) -> dict[str, Any]:
    return {**_row(i), "ts": _row(i)["ts"].isoformat()}


def _one_partition(s: Settings, name: str) -> tuple[Settings, str, SchemaRegistryClient]:
    """One-partition settings, a topic of the test's own, a client of the stack's registry."""
    s = s.with_(partitions=1)
    topic = f"{s.namespace}.{name}"
    create_topic(s, topic, 1)
    return s, topic, SchemaRegistryClient({"url": s.registry_url})


def _canon(r: dict[str, Any]) -> dict[str, Any]:
    return {**r, "ts": datetime.fromisoformat(r["ts"]).astimezone(UTC).isoformat()}


def test_avro_values_become_rows_and_undecodable_ones_error_rows(
    engine_settings: Settings,
) -> None:
    s, topic, client = _one_partition(engine_settings, "avro")
    ctx = SerializationContext(topic, MessageField.VALUE)
    good = AvroSerializer(client, AVRO)
    good_values = [good(_row(i), ctx) for i in range(40)]
    # a second subject holds the text-amount schema (the topic's would refuse it as
    # incompatible); its values arrive on the same topic
    other = AvroSerializer(client, AVRO_TEXT_AMOUNT, conf={"auto.register.schemas": True})
    wrong_type = other({**_row(1), "amount": "lots"}, SerializationContext(f"{topic}-x", MessageField.VALUE))  # fmt: skip
    schema_id = struct.unpack(">I", good_values[0][1:5])[0]
    bad = {
        "json": b'{"uid": 1, "amount": 2.0, "kind": "CARD", "ts": "2026-01-01T00:00:00Z"}',
        "unknown id": b"\x00" + struct.pack(">I", 987_654) + good_values[0][5:],
        "cut": good_values[3][:7],
        "short": b"\x00\x00",
        "wrong type": wrong_type,
    }
    payloads = good_values[:20] + list(bad.values()) + good_values[20:]
    fmt = Avro(registry="confluent", url=s.registry_url)
    rows, errors = _ingest(s, topic, fmt, payloads)

    assert sorted(map(_canon, rows), key=str) == sorted(map(_expected, range(40)), key=str)
    by_payload = {e["payload"]: e for e in errors}
    assert set(by_payload) == set(bad.values()), [e["reason"] for e in errors]
    reasons = {name: by_payload[v]["reason"] for name, v in bad.items()}
    assert "first byte 123, not 0" in reasons["json"]
    assert "schema id 987654 is not in the registry" in reasons["unknown id"]
    assert f"does not match schema {schema_id}" in reasons["cut"]
    assert "too short" in reasons["short"]
    assert "amount" in reasons["wrong type"]
    for name, v in bad.items():
        e = by_payload[v]
        assert e["dataset"] == "Txn" and e["source"]["topic"] == topic, e
        assert e["stage"] == ("schema" if name == "wrong type" else "parse"), e


def test_protobuf_values_become_rows_whether_the_registry_holds_a_descriptor_or_proto_text(
    engine_settings: Settings,
) -> None:
    s, topic, client = _one_partition(engine_settings, "proto")
    Txn = message_class(PROTO, "test.Txn")

    def message(i: int) -> Any:
        r = _row(i)
        m = Txn(uid=r["uid"], amount=r["amount"], kind=r["kind"])
        m.ts.FromDatetime(r["ts"])
        return m

    # the serializer registers a base64 FileDescriptorProto; Txn is the file's 2nd message
    ser = ProtobufSerializer(Txn, client, {"use.deprecated.format": False})
    ctx = SerializationContext(topic, MessageField.VALUE)
    by_serializer = [ser(message(i), ctx) for i in range(20)]
    assert by_serializer[0][5:7] == b"\x02\x02"  # message indexes [1]
    # another producer registers the .proto text; the engine compiles it (protoc)
    text_id = client.register_schema(f"{topic}-text", Schema(PROTO, "PROTOBUF"))
    by_text = [b"\x00" + struct.pack(">I", text_id) + b"\x02\x02" + message(i).SerializeToString()
               for i in range(20, 40)]  # fmt: skip
    bad = {
        "avro bytes": b"\x00" + struct.pack(">I", text_id) + b"\x02\x02\xff\xff\xff",
        "index": b"\x00" + struct.pack(">I", text_id) + b"\x02\x0a" + b"",
    }
    auth = {"username": "u", "password": "p"}
    fmt = Protobuf(registry="confluent", url=s.registry_url, **auth)
    rows, errors = _ingest(s, topic, fmt, by_serializer + list(bad.values()) + by_text)

    assert sorted(map(_canon, rows), key=str) == sorted(map(_expected, range(40)), key=str)
    by_payload = {e["payload"]: e for e in errors}
    assert set(by_payload) == set(bad.values()), [e["reason"] for e in errors]
    assert "does not parse as test.Txn" in by_payload[bad["avro bytes"]]["reason"]
    assert "message index path [5]" in by_payload[bad["index"]]["reason"]
    assert all(e["stage"] == "parse" for e in errors)


def test_a_registry_that_does_not_answer_stops_the_batch_and_judges_no_row(
    live_stack: Settings,
) -> None:
    """A closed port stands for the registry: the batch raises ``ServiceUnavailable`` (a
    transient fault the runner waits out), not one error row per message."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: nothing listens there
    job = _source_job(
        "t", Avro(registry="confluent", url=f"http://127.0.0.1:{port}/apis/ccompat/v7")
    )
    value = b"\x00\x00\x00\x00\x07" + b"\x02"
    msgs = [InMessage("t", 0, i, None, value, 0) for i in range(20)]
    with pytest.raises(ServiceUnavailable) as caught:
        process_isolating(job.process, msgs, MemoryState(), lambda m, e: pytest.fail(str(e)), "down")  # fmt: skip
    assert transient(caught.value)
    assert f"127.0.0.1:{port}" in str(caught.value)


def test_clean_avro_batches_take_the_column_road_and_equal_the_row_road(
    live_stack: Settings, unique_name: str
) -> None:
    client = SchemaRegistryClient({"url": live_stack.registry_url})
    topic = f"{unique_name}.cols"
    ser = AvroSerializer(client, AVRO)
    ctx = SerializationContext(topic, MessageField.VALUE)
    job = _source_job(topic, Avro(registry="confluent", url=live_stack.registry_url), 2)
    msgs = [InMessage(topic, 0, i, None, ser(_row(i), ctx)) for i in range(50)]
    assert job.format is not None
    decoded = decode_each(job.format, msgs, MAX_MESSAGE_BYTES)
    fast = job._by_columns(msgs, MemoryState(), decoded)  # noqa: SLF001
    slow = job._row_by_row(msgs, MemoryState(), decoded)  # noqa: SLF001
    assert fast is not None, "a clean batch must take the column road"
    rows = [[(o.partition, r) for o in it.outputs for r in rows_of(o.value)] for it in (fast, slow)]
    assert rows[0] == rows[1] and len(rows[0]) == 50
    assert fast.errors == slow.errors == []
    assert fast.writes == slow.writes
    assert sorted(map(_canon, (r for _, r in rows[0])), key=str) == sorted(
        map(_expected, range(50)), key=str
    )


def test_a_schema_id_that_fails_is_fetched_once_and_each_value_of_it_is_an_error_row(
    live_stack: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An id the registry does not hold is asked for once, not once per value (a batch of
    them would otherwise cost a registry round trip each); a tombstone's reason names the
    source's format."""
    fetched: list[int] = []
    real = Registry.schema

    def counting(self: Registry, schema_id: int) -> Any:
        fetched.append(schema_id)
        return real(self, schema_id)

    monkeypatch.setattr(Registry, "schema", counting)
    url = live_stack.registry_url
    for fmt, kind in (
        (Avro(registry="confluent", url=url), "an Avro record"),
        # Fennel's Protobuf requires credentials; the stack's registry ignores them
        (Protobuf(registry="confluent", url=url, username="u", password="p"), "a Protobuf message"),
    ):
        fetched.clear()
        job = _source_job("t", fmt)
        unknown = b"\x00" + struct.pack(">I", 2_000_000_000) + b"\x00\x02"
        msgs = [InMessage("t", 0, i, None, unknown, 0) for i in range(30)]
        msgs.append(InMessage("t", 0, 30, b"k", None, 0))
        it = job.process(msgs, MemoryState())
        assert fetched == [2_000_000_000], fetched
        assert len(it.errors) == 31 and not it.outputs
        reasons = [e.reason for e in it.errors]
        assert all("is not in the registry" in r for r in reasons[:30]), reasons[0]
        assert f"a row must be {kind}" in reasons[30]


# a new version of the schema (an optional field with a default): values written with it
# carry an id the runner has not fetched yet
AVRO_V2 = AVRO.replace(
    '{"name": "uid", "type": "long"},',
    '{"name": "uid", "type": "long"}, {"name": "note", "type": ["null", "string"], "default": null},',
)


@pytest.mark.exclusive  # stops the stack's shared registry
def test_the_runner_rides_out_a_registry_outage_and_loses_no_row(
    engine_settings: Settings,
) -> None:
    """The stack's registry is stopped while values of a schema the runner has not seen wait
    on the topic: no row is judged without it, none goes to the error topic, and once the
    registry is back every row arrives exactly once (``run_forever`` retries with backoff)."""
    s, topic, client = _one_partition(engine_settings, "outage")
    ctx = SerializationContext(topic, MessageField.VALUE)
    v1, v2 = AvroSerializer(client, AVRO), AvroSerializer(client, AVRO_V2)
    first = [v1(_row(i), ctx) for i in range(20)]
    second = [v2({**_row(i), "note": None}, ctx) for i in range(20, 40)]
    jobs = commit(s, _datasets(topic, Avro(registry="confluent", url=s.registry_url)))
    src = jobs["source:Txn"]
    p = Producer({"bootstrap.servers": s.kafka_servers})
    stop = threading.Event()
    t = threading.Thread(target=run_forever, args=(s, src, 0, "outage-test", stop), daemon=True)
    t.start()
    try:
        for v in first:
            p.produce(topic, v, partition=0)
        assert p.flush(30) == 0
        out = src.spec.output_topic
        wait_for(lambda: len(read_topic(s, out, 1, timeout=5)) == 20, 120, "rows before")
        stack.down(s, ["registry"])
        try:
            for v in second:
                p.produce(topic, v, partition=0)
            assert p.flush(30) == 0
            time.sleep(4)  # the runner meets the outage, and keeps retrying
            assert len(read_topic(s, out, 1, timeout=5)) == 20
        finally:
            assert all(r.health.ok for r in stack.up(s, ["registry"]))
        wait_for(lambda: len(read_topic(s, out, 1, timeout=5)) >= 40, 120, "rows after")
    finally:
        stop.set()
        t.join(120)
    rows = [r for _, _, r in read_topic(s, src.spec.output_topic, 1)]
    assert sorted(map(_canon, rows), key=str) == sorted(map(_expected, range(40)), key=str)
    assert raw_records(s, src.spec.error_topic) == []
