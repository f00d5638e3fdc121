"""What a source job's batch costs per value format: JSON, Avro and Protobuf side by side.

The same events (``{uid, amount, kind, ts}``) are written three ways — JSON text, and Avro
and Protobuf by confluent-kafka's own serializers against the stack's schema registry — and
one source job of each (``engine.jobs.source.SourceJob``, as its runner builds it) judges
the same batches of 5,000 values in this process: decoding, schema and restriction checks,
the watermark, the Arrow batch it would produce. Kafka is left out on purpose (the stream
bench measures the whole path); this isolates what the format adds. Alternating rounds,
best and median of each, in one run: JSON is the baseline.

    .venv/bin/python -m bench.source_formats_bench --events 50000 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from fennel_dagster import commit_spec, dataset, meta, source
from fennel_dagster.commit.compiler import compile_blueprints, jobs_of
from fennel_dagster.commit.graph import EntityGraph
from fennel_dagster.engine.jobs.protobuf_values import message_class
from fennel_dagster.engine.jobs.source import SourceJob
from fennel_dagster.engine.messages import InMessage
from fennel_dagster.ops.state import MemoryState
from fennel_dagster.settings import get_settings
from fennel_dagster.sources import Avro, Kafka, Protobuf

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
BATCH = 5000
AVRO = """{"type": "record", "name": "Ev", "namespace": "bench", "fields": [
  {"name": "uid", "type": "long"}, {"name": "amount", "type": "double"},
  {"name": "kind", "type": "string"},
  {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}"""
PROTO = """syntax = "proto3";
package bench;
import "google/protobuf/timestamp.proto";
message Ev { int64 uid = 1; double amount = 2; string kind = 3; google.protobuf.Timestamp ts = 4; }
"""


def _job(fmt: str | Avro | Protobuf) -> SourceJob:
    @meta(owner="bench@example.com")
    @source(Kafka(name="k").topic("ext", format=fmt), disorder="1d", cdc="append")
    @dataset
    class Ev:
        uid: int
        amount: float
        kind: str
        ts: datetime

    jobs = jobs_of(compile_blueprints(EntityGraph.build(commit_spec("b", [Ev], []))))
    return SourceJob(next(j for j in jobs if j.KIND == "source"), 1)  # type: ignore[arg-type]


def _events(n: int) -> list[dict[str, Any]]:
    return [{"uid": i % 1000, "amount": float(i % 100) + 0.5, "kind": "card",
             "ts": T0 + timedelta(milliseconds=100 * i)} for i in range(n)]  # fmt: skip


def _values(events: list[dict[str, Any]], url: str) -> dict[str, tuple[SourceJob, list[bytes]]]:
    client = SchemaRegistryClient({"url": url})
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    ctx = SerializationContext(topic, MessageField.VALUE)
    avro = AvroSerializer(client, AVRO)
    Ev = message_class(PROTO, "bench.Ev")

    def message(e: dict[str, Any]) -> Any:
        m = Ev(uid=e["uid"], amount=e["amount"], kind=e["kind"])
        m.ts.FromDatetime(e["ts"])
        return m

    proto = ProtobufSerializer(Ev, client, {"use.deprecated.format": False})
    pctx = SerializationContext(f"{topic}-p", MessageField.VALUE)
    auth = {"username": "u", "password": "p"}
    return {
        "JSON": (
            _job("json"),
            [json.dumps({**e, "ts": e["ts"].isoformat()}).encode() for e in events],
        ),  # fmt: skip
        "Avro": (_job(Avro(registry="confluent", url=url)), [avro(e, ctx) for e in events]),
        "Protobuf": (
            _job(Protobuf(registry="confluent", url=url, **auth)),
            [proto(message(e), pctx) for e in events],
        ),  # fmt: skip
    }


def _run(job: SourceJob, values: list[bytes]) -> float:
    """Seconds of CPU for the job's batches over ``values``; every row must come out."""
    state, rows = MemoryState(), 0
    t0 = time.process_time()
    for at in range(0, len(values), BATCH):
        msgs = [InMessage("ext", 0, at + i, None, v, 0)
                for i, v in enumerate(values[at : at + BATCH])]  # fmt: skip
        it = job.process(msgs, state)
        assert not it.errors, it.errors[:1]
        rows += sum(o.rows for o in it.outputs)
        state.apply(it.writes)
    spent = time.process_time() - t0
    assert rows == len(values), (rows, len(values))
    return spent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    s = get_settings()
    contenders = _values(_events(args.events), s.registry_url)
    for job, values in contenders.values():
        _run(job, values[:BATCH])  # warm: schemas fetched, code paths loaded
    spent: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name, (job, values) in contenders.items():
            spent[name].append(_run(job, values))
    n = args.events
    lines = [
        "# Source job per value format",
        "",
        f"`python -m bench.source_formats_bench --events {n} --rounds {args.rounds}` on "
        f"{datetime.now(UTC):%Y-%m-%d}; one source job per format in one process, batches of "
        f"{BATCH:,} values (the events `{{uid, amount, kind, ts}}`), rounds alternating; "
        "CPU time of the process.",
        "",
        "| format | value bytes (mean) | events per CPU-second, best | median | vs JSON (best) |",
        "|---|---:|---:|---:|---:|",
    ]
    best_json = n / min(spent["JSON"])
    for name, (_, values) in contenders.items():
        best, med = n / min(spent[name]), n / statistics.median(spent[name])
        size = sum(map(len, values)) / len(values)
        lines.append(f"| {name} | {size:.0f} | {best:,.0f} | {med:,.0f} | "
                     f"{best / best_json:.2f} |")  # fmt: skip
    text = "\n".join(lines) + "\n"
    print(text)
    (ROOT / "bench" / "results" / "source_formats.md").write_text(text)


if __name__ == "__main__":
    main()
