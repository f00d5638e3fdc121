"""The offline writer: a dataset's topic -> its Delta table, exactly once.

One writer per table (the job has one partition; it reads every partition of the topic).
Each flush is one Delta commit holding the rows and, as app transactions, the last offset of
every topic partition they came from; on start the writer seeks to the offsets the table
records. A crash anywhere leaves either the whole commit or none of it, and the restart
resumes from what the table says: no row is lost or written twice. A second writer (a
zombie after a hand-over) conflicts at its next commit (conditional put) and stops.

A platform table's prefix is the bank's: before each commit the writer checks the prefix's
marker, which a destroy (its dataset deleted, a version bumped) deletes first, and stops
writing once it is gone (``TableReleased``), so its last rows do not outlive the table in the
seconds before it hears that its job was removed.

An S3 sink (``plan.S3SinkJobSpec``) is written the same way into its own table, in the sink's
bucket of the platform's object store. That bucket is the user's: the writer does not create
it (a missing one fails the job, naming it) and never expires the sink's rows.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, Producer, TopicPartition

from fennel_dagster.engine.error_records import encode_error
from fennel_dagster.engine.failures import Fenced
from fennel_dagster.engine.jobs.common import decode_messages, decode_rows
from fennel_dagster.engine.kafka_clients import consumer, in_message, topic_partitions
from fennel_dagster.engine.messages import ErrorRecord, InMessage
from fennel_dagster.engine.object_store import object_store
from fennel_dagster.errors import EngineError
from fennel_dagster.metadata.registry import JobRow
from fennel_dagster.offline.table import (
    OfflineTable,
    TableConflict,
    batch_to_arrow,
    records_to_arrow,
    to_arrow,
)
from fennel_dagster.ops import batches
from fennel_dagster.ops.index import DELETED
from fennel_dagster.ops.rows import loads
from fennel_dagster.s3 import s3_client
from fennel_dagster.settings import Settings
from fennel_dagster.wire import plan, spec

log = logging.getLogger("fennel_dagster.engine.offline")

FLUSH_ROWS = 50_000  # a commit per this many rows at most (else every offline_flush_s)
EXPIRE_EVERY_S = 3600.0


class MissingSinkBucket(EngineError):
    """An S3 sink's bucket is not on the platform's object store (the platform writes into
    the user's bucket; it does not create one)."""


class TableReleased(Fenced):
    """The table's prefix was destroyed (its job deleted): nothing more is written to it."""


class OfflineWriter:
    def __init__(self, settings: Settings, job: JobRow, owner: str) -> None:
        assert isinstance(job.spec, plan.OfflineJobSpec | plan.S3SinkJobSpec), job.name
        self.settings = settings
        self.job = job
        self.spec: plan.OfflineJobSpec | plan.S3SinkJobSpec = job.spec
        self.sink = isinstance(job.spec, plan.S3SinkJobSpec)
        self.owner = owner
        self.table = OfflineTable(settings, self.spec.table)
        # the bank's marker of a platform table's prefix (a sink's table is the user's)
        self._marker = None if self.sink else f"{self.table.prefix}.fennel-asset"
        self._objects = object_store(settings)
        self.commits = 0
        self.rows = 0
        self.bad_rows = 0
        self._producer: Producer | None = None

    def check_bucket(self) -> None:
        """An S3 sink's bucket must exist (the platform's own bucket is the stack's)."""
        if not self.sink:
            return
        bucket = self.table.bucket
        if self.settings.s3_url is None:
            exists = (self.settings.local_object_dir / bucket).is_dir()
        else:
            client = s3_client(self.settings)
            try:
                client.head_bucket(Bucket=bucket)
                exists = True
            except client.exceptions.ClientError as e:
                if e.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket"):
                    raise  # anything but "not there" (S3 down, no access) is not ours to judge
                exists = False
        if not exists:
            name = self.spec.dataset.name
            raise MissingSinkBucket(
                f"{self.job.name}: the S3 sink of {name} writes s3://{bucket}/{self.table.prefix}, "
                f"but bucket {bucket!r} does not exist on the platform's object store; create it "
                "(the platform writes into the sink's bucket, it does not create one)"
            )

    def run(self, stop: threading.Event, beat: Callable[[], None]) -> None:
        self.check_bucket()
        topic = self.spec.input_topic
        parts = topic_partitions(self.settings, topic, self.job.name, stop=stop)
        done = self.table.committed_offsets(topic, parts)
        c = consumer(self.settings, f"{self.job.name}.offline")
        c.assign([TopicPartition(topic, p, done[p] + 1 if p in done else OFFSET_BEGINNING)
                  for p in range(parts)])  # fmt: skip
        log.info("%s: writing %s from %s", self.job.name, self.table.prefix, done or "the start")
        pending: list[InMessage] = []
        first_at = 0.0
        last_beat = last_expire = 0.0
        try:
            while not stop.is_set():
                now = time.monotonic()
                if now - last_beat > 2.0:
                    beat()
                    last_beat = now
                if not self.sink and now - last_expire > EXPIRE_EVERY_S:
                    self.table.expire(dt.datetime.now(dt.UTC))
                    last_expire = now
                batch = c.consume(num_messages=5000, timeout=0.5)
                for msg in batch:
                    if msg.error() is None:
                        if not pending:
                            first_at = time.monotonic()
                        pending.append(in_message(msg))
                if pending and (
                    len(pending) >= FLUSH_ROWS
                    or time.monotonic() - first_at >= self.settings.offline_flush_s
                ):
                    self._flush(pending)
                    pending = []
            if pending:
                self._flush(pending)
        finally:
            c.close()

    def _flush(self, msgs: list[InMessage]) -> None:
        if self._marker is not None and self._objects.get_bytes(self._marker) is None:
            raise TableReleased(f"{self.job.name}: its table {self.table.prefix} was destroyed; "
                                f"{len(msgs)} messages not written")  # fmt: skip
        ds = self.spec.table.dataset
        present = [m for m in msgs if m.value is not None]
        table = _straight(present, ds)
        if table is None:  # a row that needs typing (or cannot be typed: an error record)
            data, rows, deleted, origin, errors = self._typed(present)
            if errors:
                self._report(errors)
            table = to_arrow(rows, deleted, [data[i].partition for i in origin],
                             [data[i].offset for i in origin], ds)  # fmt: skip
        offsets: dict[tuple[str, int], int] = {}
        for m in msgs:
            offsets[(m.topic, m.partition)] = max(m.offset, offsets.get((m.topic, m.partition), -1))
        try:
            self.table.append(table, offsets)
        except TableConflict as e:
            raise Fenced(str(e)) from e
        self.commits += 1
        self.rows += table.num_rows

    def _typed(
        self, data: list[InMessage]
    ) -> tuple[list[InMessage], pd.DataFrame, pd.Series, list[int], list[ErrorRecord]]:
        """The messages whose rows the table can hold, those rows typed, their delete flags,
        the message of each row, and an error record for each other message. Our own jobs
        wrote the topic, so a row that cannot be typed is rare (a bug, or a hand-made
        message); it goes to the dataset's error topic rather than stopping the table. Only a
        batch holding one is typed again message by message."""
        ds = self.spec.table.dataset
        try:
            d = decode_messages(data, ds.fields, ds.name)
        except (ValueError, TypeError, OverflowError):
            good: list[InMessage] = []
            errors = []
            for m in data:
                try:
                    _, _, bad = decode_rows([m], ds.fields, ds.name)
                except (ValueError, TypeError, OverflowError) as e:
                    errors.append(ErrorRecord(ds.name, "offline", (
                        f"{self.job.name}: the row of {ds.name} at {m.topic}[{m.partition}]@"
                        f"{m.offset} does not fit its fields ({type(e).__name__}: {e}); the "
                        "offline table skips it"), m.topic, m.partition, m.offset,
                        m.value or b"", "offline table"))  # fmt: skip
                    continue
                errors += bad
                if not bad:
                    good.append(m)
            d = decode_messages(good, ds.fields, ds.name)
            return good, d.rows, d.deleted, d.origin, errors
        return data, d.rows, d.deleted, d.origin, d.errors

    def _report(self, errors: list[ErrorRecord]) -> None:
        """Error records to the dataset's error topic before the commit that skips their
        rows: a crash in between reports them again (at least once), never loses one."""
        if not self.spec.error_topic:
            raise ValueError(f"{self.job.name}: {errors[0].reason}")  # a spec from before
        if self._producer is None:
            self._producer = Producer({"bootstrap.servers": self.settings.kafka_servers,
                                       "enable.idempotence": True})  # fmt: skip
        for err in errors:
            self._producer.produce(self.spec.error_topic, encode_error(err))
        if self._producer.flush(30) != 0:
            raise KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT))
        self.bad_rows += len(errors)
        log.warning("%s: %d row(s) sent to %s: %s", self.job.name, len(errors),
                    self.spec.error_topic, errors[0].reason)  # fmt: skip


def _straight(msgs: list[InMessage], ds: spec.DatasetSpec) -> pa.Table | None:
    """The table of ``msgs`` decoded straight into Arrow, or None (the typed road)."""
    if msgs and all(batches.is_batch(m.value) for m in msgs):
        return _straight_batches(msgs, ds)
    records = []
    for m in msgs:
        if batches.is_batch(m.value):
            return None
        try:
            rec = loads(m.value or b"")
        except ValueError:
            return None
        if not isinstance(rec, dict):
            return None
        records.append(rec)
    deleted = [bool(r.get(DELETED)) for r in records]
    return records_to_arrow(records, deleted, [m.partition for m in msgs],
                            [m.offset for m in msgs], ds)  # fmt: skip


def _straight_batches(msgs: list[InMessage], ds: spec.DatasetSpec) -> pa.Table | None:
    """Batch messages whose every field travels as Arrow's own type, as the table's rows
    (each row at its message's partition and offset); None if one needs typing."""
    try:
        tables = [batches.table_of(m.value or b"") for m in msgs]
    except batches.BatchFormatError:
        return None
    names = [f.name for f in ds.fields]
    if any(not batches.all_native(t, names) for t in tables):
        return None
    sizes = [t.num_rows for t in tables]
    whole = pa.concat_tables([t.select([n for n in t.column_names if n in (*names, DELETED)])
                              for t in tables], promote_options="default")  # fmt: skip
    return batch_to_arrow(
        whole,
        np.repeat([m.partition for m in msgs], sizes),
        np.repeat([m.offset for m in msgs], sizes),
        ds,
    )
