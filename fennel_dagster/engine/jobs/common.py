"""Row (de)serialisation shared by the jobs: internal topics carry batch messages (Arrow IPC,
``ops.batches``), one per partition and iteration; JSON rows (the format before) still read."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa

from fennel_dagster.engine.messages import ErrorRecord, InMessage, OutRecord
from fennel_dagster.engine.partitioning import partition_for
from fennel_dagster.ops import batches
from fennel_dagster.ops.index import DELETED
from fennel_dagster.ops.keys import key_prefix
from fennel_dagster.ops.limits import DATASET_TOPIC_MAX_BYTES, MAX_ROW_BYTES
from fennel_dagster.ops.rows import dumps, from_records, json_column, loads, to_records
from fennel_dagster.ops.schema import check_rows, held_as_declared
from fennel_dagster.wire import spec

# a batch message stays well under the topic's max.message.bytes (Kafka's own framing and
# a row of up to MAX_ROW_BYTES as its only row must fit)
BATCH_MESSAGE_BYTES = DATASET_TOPIC_MAX_BYTES // 2


class Decoded(NamedTuple):
    """Rows of some messages, typed; their delete flags; undecodable messages as errors; and
    for each row, the index of the message it came in (a batch message holds many)."""

    rows: pd.DataFrame
    deleted: pd.Series
    errors: list[ErrorRecord]
    origin: list[int]


def decode_rows(
    messages: Sequence[InMessage], fields: Sequence[spec.FieldSpec], dataset: str
) -> tuple[pd.DataFrame, pd.Series, list[ErrorRecord]]:
    """Rows of ``messages`` typed by ``fields``, their delete flags, and undecodable ones."""
    d = decode_messages(messages, fields, dataset)
    return d.rows, d.deleted, d.errors


def decode_messages(
    messages: Sequence[InMessage], fields: Sequence[spec.FieldSpec], dataset: str
) -> Decoded:
    """``decode_rows`` with each row's message: batch messages and JSON rows, in order.
    Consecutive batch messages of one schema are typed as one table: typing a table has a
    fixed cost of about 2 ms, which a batch of many small messages paid for each."""
    parts: list[tuple[pd.DataFrame, np.ndarray]] = []
    origin: list[int] = []
    tables: list[pa.Table] = []
    records: list[dict[str, Any]] = []
    rec_origin: list[int] = []
    errors: list[ErrorRecord] = []

    def flush_tables() -> None:
        if tables:
            table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
            parts.append(batches.frame_of(table, fields))
            tables.clear()

    def flush_records() -> None:
        if records:
            flags = np.array([bool(r.get(DELETED)) for r in records], dtype=bool)
            parts.append((from_records(records, fields), flags))
            origin.extend(rec_origin)
            records.clear()
            rec_origin.clear()

    for i, m in enumerate(messages):
        if m.value is None:
            continue
        if batches.is_batch(m.value):
            try:
                table = batches.table_of(m.value)
            except batches.BatchFormatError as e:
                errors.append(ErrorRecord(dataset, "decode", f"internal batch of {dataset} at "
                    f"{m.topic}[{m.partition}]@{m.offset}: {e}", m.topic, m.partition,
                    m.offset, m.value))  # fmt: skip
                continue
            flush_records()
            if tables and not table.schema.equals(tables[0].schema, check_metadata=True):
                flush_tables()
            tables.append(table)
            origin.extend([i] * table.num_rows)
            continue
        try:
            rec = loads(m.value)
            if not isinstance(rec, dict):
                raise ValueError(f"expected a JSON object, got {type(rec).__name__}")
        except ValueError as e:
            errors.append(ErrorRecord(dataset, "decode", f"internal row of {dataset} at "
                f"{m.topic}[{m.partition}]@{m.offset} is not a JSON row: {e}",
                m.topic, m.partition, m.offset, m.value))  # fmt: skip
            continue
        flush_tables()
        records.append(rec)
        rec_origin.append(i)
    flush_tables()
    flush_records()
    if not parts:
        rows = from_records([], fields)
        return Decoded(rows, pd.Series([], dtype=bool), errors, origin)
    if len(parts) == 1:
        rows, flags = parts[0]
    else:
        rows = pd.concat([p for p, _ in parts], ignore_index=True)
        flags = np.concatenate([f for _, f in parts])
    return Decoded(rows, pd.Series(flags, dtype=bool), errors, origin)


def encode_rows(
    ds: spec.DatasetSpec,
    rows: pd.DataFrame,
    topic: str,
    partitions: int,
    source: InMessage,
    where: str,
    key_fields: Sequence[str] | None = None,
    fields: Sequence[spec.FieldSpec] | None = None,
) -> tuple[list[OutRecord], list[ErrorRecord]]:
    """Schema-checked output rows as batch messages of ``topic``, partitioned by key."""
    out: list[OutRecord] = []
    errors: list[ErrorRecord] = []
    if rows.empty:
        return out, errors
    if fields is None and held_as_declared(ds, rows):  # nothing to check, row by row
        good, names = rows, [f.name for f in ds.fields]
    elif fields is None:
        good, bad = check_rows(ds, rows)
        for b in bad:
            errors.append(ErrorRecord(ds.name, "output-schema", f"{where}: {b.reason}",
                source.topic, source.partition, source.offset, dumps(b.row), where, b.row))  # fmt: skip
        names = [f.name for f in ds.fields]
    else:
        good, names = rows, [f.name for f in fields]
    keys = list(ds.keys) if key_fields is None else list(key_fields)
    specs = list(ds.fields) if fields is None else list(fields)

    def too_big(row: int, raw: bytes) -> ErrorRecord:
        return ErrorRecord(ds.name, "output-schema", f"{where}: a row of {ds.name} is "
            f"{len(raw):,} bytes as JSON, over the limit of {MAX_ROW_BYTES:,}",
            source.topic, source.partition, source.offset, raw[:4096], where)  # fmt: skip

    if good.empty:
        return out, errors
    parts = partitions_of(good, keys, partitions, source.partition % partitions)
    out, big = batch_records(good[names], specs, None, parts, topic, too_big)
    return out, errors + big


def partitions_of(
    rows: pd.DataFrame, key_fields: Sequence[str], partitions: int, keyless: int
) -> np.ndarray:
    """The partition of each row: by its key values (``engine.partitioning``, the rule every
    producer and every lookup follows), or ``keyless`` for a dataset without keys (its rows
    stay in the partition of the job that made them)."""
    if not key_fields:
        return np.full(len(rows), keyless, dtype=np.int64)
    if partitions == 1:  # every key's hash modulo 1
        return np.zeros(len(rows), dtype=np.int64)
    columns = [json_column(rows[k]) for k in key_fields]
    # remembered: a stream meets the same keys over and over. One memo per partition count
    # and key dtypes, as True and 1 are one dict key but not one partition key.
    memo = _MEMOS.setdefault((partitions, *(str(rows[k].dtype) for k in key_fields)), {})
    if len(memo) > _MEMO_KEYS:
        memo.clear()
    out = np.empty(len(rows), dtype=np.int64)
    for i, key in enumerate(zip(*columns, strict=True)):
        try:
            part = memo.get(key)
            if part is None:
                part = memo[key] = partition_for(key_prefix(key), partitions)
        except TypeError:  # a list or dict in a key: not hashable, not remembered
            part = partition_for(key_prefix(key), partitions)
        out[i] = part
    return out


_MEMOS: dict[tuple[Any, ...], dict[tuple[Any, ...], int]] = {}
_MEMO_KEYS = 1 << 16


def batch_records(
    rows: pd.DataFrame,
    fields: Sequence[spec.FieldSpec],
    deleted: Sequence[bool] | None,
    parts: np.ndarray,
    topic: str,
    too_big: Callable[[int, bytes], ErrorRecord],
) -> tuple[list[OutRecord], list[ErrorRecord]]:
    """``rows`` as batch messages of ``topic``, one per partition (more if one would be over
    the topic's message size); a row over ``MAX_ROW_BYTES`` as JSON is an error instead."""
    errors: list[ErrorRecord] = []
    table = batches.to_table(rows, fields, deleted)
    maybe = np.flatnonzero(batches.json_bytes_bound(table) > MAX_ROW_BYTES)
    if len(maybe):
        names = [f.name for f in fields]
        drop = []
        for i in maybe.tolist():
            rec = to_records(rows.iloc[[i]], names)[0]
            raw = dumps(rec)
            if len(raw) > MAX_ROW_BYTES:
                errors.append(too_big(i, raw))
                drop.append(i)
        if drop:
            keep = np.setdiff1d(np.arange(len(rows)), drop)
            table, parts = table.take(keep), parts[keep]
    out: list[OutRecord] = []
    for part in np.unique(parts).tolist():
        mine = table if len(parts) and (parts == part).all() else table.filter(parts == part)
        for value, n in batches.messages(mine, BATCH_MESSAGE_BYTES):
            out.append(OutRecord(topic, part, None, value, n))
    return out, errors
