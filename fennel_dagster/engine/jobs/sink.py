"""Kafka sink job: a dataset's topic partition -> Debezium JSON change events on a sink topic.

``@sink(Kafka(...).topic(t, format="json"), cdc="debezium")``: every change of the dataset
becomes one message on ``t``, ``{"payload": {"before", "after", "op", "ts_ms", "source"}}``,
produced in the runner's Kafka transaction together with the input offsets (so exactly once:
the sink topic is on the platform's own cluster, ``commit.executable``).

What a change is follows the dataset's lookups. A keyless dataset's rows are appends: each
is a create (``"c"``). A keyed dataset's rows are upserts and deletes (``index.DELETED``) of
its keys, and a key's current row is its newest version by event time (ties broken by
content, as the index does). The job keeps that version per key in its state, and a row
that becomes the key's current version is written as ``"c"`` (the key had none), ``"u"``
(``before`` is the row it replaces) or ``"d"`` (``before`` is the deleted row). A row older
than the key's current version changes nothing a lookup returns now, and neither does a
delete of an absent key or a row identical to the current one: they write nothing.
The message key is the JSON of the key fields (none for keyless datasets), so one key's
events land on one partition of the sink topic, in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from fennel_dagster.engine.jobs.common import decode_rows
from fennel_dagster.engine.messages import ErrorRecord, InMessage, Iteration, OutRecord
from fennel_dagster.engine.partitioning import partition_for
from fennel_dagster.ops.index import DELETED
from fennel_dagster.ops.keys import key_prefix, micros
from fennel_dagster.ops.rows import content_seq, dumps, loads, to_records
from fennel_dagster.ops.state import StateReader, WriteBatch
from fennel_dagster.wire import plan

# a message must fit the sink topic's broker default (message.max.bytes, about 1 MiB); an
# update carries two rows, each up to ``MAX_ROW_BYTES``, so a huge one becomes an error row
MAX_EVENT_BYTES = 1_000_000


@dataclass(frozen=True)
class Version:
    """A key's row as of one event: its event time (µs), content tie-breaker, delete flag."""

    row: dict[str, Any]
    ts_us: int
    seq: int
    deleted: bool = False

    def newer_than(self, other: Version) -> bool:
        return (self.ts_us, self.seq) > (other.ts_us, other.seq)

    def to_bytes(self) -> bytes:
        return dumps({"row": self.row, "ts": self.ts_us, "seq": self.seq, "deleted": self.deleted})

    @classmethod
    def from_bytes(cls, raw: bytes) -> Version:
        d = loads(raw)
        return cls(d["row"], int(d["ts"]), int(d["seq"]), bool(d["deleted"]))


def envelope(
    op: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    ts_us: int,
    source: dict[str, Any],
) -> dict[str, Any]:
    """A Debezium change event (JSON converter layout: the change under ``payload``)."""
    return {
        "payload": {
            "before": before,
            "after": after,
            "op": op,
            "ts_ms": ts_us // 1000,
            "source": source,
        }
    }


def change(prev: Version | None, new: Version, source: dict[str, Any]) -> dict[str, Any] | None:
    """The event for one key when ``new`` arrives and ``prev`` is its current version (None:
    it has none), or None when ``new`` does not change the key's current row."""
    if prev is not None and not new.newer_than(prev):
        return None  # older than (or the same as) what lookups return now
    if prev is None or prev.deleted:  # the key has no row: a create, or nothing to delete
        return None if new.deleted else envelope("c", None, new.row, new.ts_us, source)
    if new.deleted:
        return envelope("d", prev.row, None, new.ts_us, source)
    return envelope("u", prev.row, new.row, new.ts_us, source)


class KafkaSinkJob:
    def __init__(self, job: plan.KafkaSinkJobSpec, sink_partitions: int) -> None:
        self.name = job.name
        self.dataset = job.dataset
        self.topic = job.input_topic
        self.output = job.output_topic
        self.sink_partitions = sink_partitions
        self.keys = list(job.dataset.keys)
        self.stateful = bool(self.keys)  # keyless rows are appends: nothing to remember
        self.namespace = f"sink:{job.name}"
        self.fields = [f.name for f in job.dataset.fields]
        self.source = {"dataset": job.dataset.name, "version": job.dataset.version}

    def input_partitions(self, partition: int) -> list[tuple[str, int]]:
        return [(self.topic, partition)]

    def process(self, messages: list[InMessage], state: StateReader) -> Iteration:
        rows, deleted, errors = decode_rows(messages, self.dataset.fields, self.dataset.name)
        it = Iteration(errors=errors, writes=WriteBatch())
        if rows.empty:
            return it
        records = to_records(rows, self.fields)
        stamps = [micros(pd.Timestamp(t)) for t in rows[self.dataset.timestamp].tolist()]
        flags = [bool(x) for x in deleted.tolist()]
        first = messages[0]
        current: dict[bytes, Version | None] = {}  # this batch's view of its keys
        newest: int | None = None
        for rec, ts_us, gone in zip(records, stamps, flags, strict=True):
            event: dict[str, Any] | None
            key: bytes | None
            if not self.keys:
                event = envelope("c", None, rec, ts_us, self.source)
                key = None
            else:
                seq = content_seq({**rec, DELETED: True} if gone else rec)
                new = Version(rec, ts_us, seq, gone)
                skey = key_prefix(tuple(rec[k] for k in self.keys))
                if skey not in current:
                    raw = state.get(self.namespace, skey)
                    current[skey] = Version.from_bytes(raw) if raw is not None else None
                prev = current[skey]
                if prev is not None and not new.newer_than(prev):
                    continue
                event = change(prev, new, self.source)
                current[skey] = new
                it.writes.put(self.namespace, skey, new.to_bytes())
                key = dumps({k: rec[k] for k in self.keys})
            if event is None:
                continue
            value = dumps(event)
            if len(value) > MAX_EVENT_BYTES:
                it.errors.append(ErrorRecord(self.dataset.name, "sink", (
                    f"the change event of {self.dataset.name} for sink topic {self.output!r} "
                    f"is {len(value):,} bytes as JSON, over the limit of {MAX_EVENT_BYTES:,}"
                ), first.topic, first.partition, first.offset, dumps(rec)[:4096],
                    f"sink kafka({self.output})", rec))  # fmt: skip
                continue
            part = partition_for(key if key is not None else value, self.sink_partitions)
            it.outputs.append(OutRecord(self.output, part, key, value))
            newest = ts_us if newest is None else max(newest, ts_us)
        it.newest_event_us = newest
        return it
