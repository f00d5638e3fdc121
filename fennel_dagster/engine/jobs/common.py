"""Row (de)serialisation shared by the jobs: internal topics carry one JSON row per message."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from fennel_dagster.engine.messages import ErrorRecord, InMessage, OutRecord
from fennel_dagster.engine.partitioning import partition_of_record
from fennel_dagster.ops.index import DELETED
from fennel_dagster.ops.limits import MAX_ROW_BYTES
from fennel_dagster.ops.rows import dumps, from_records, loads, to_records
from fennel_dagster.ops.schema import check_rows, held_as_declared
from fennel_dagster.wire import spec


def decode_rows(
    messages: Sequence[InMessage], fields: Sequence[spec.FieldSpec], dataset: str
) -> tuple[pd.DataFrame, pd.Series, list[ErrorRecord]]:
    """Rows of ``messages`` typed by ``fields``, their delete flags, and undecodable ones."""
    records: list[dict[str, Any]] = []
    errors: list[ErrorRecord] = []
    for m in messages:
        if m.value is None:
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
        records.append(rec)
    deleted = pd.Series([bool(r.get(DELETED)) for r in records], dtype=bool)
    return from_records(records, fields), deleted, errors


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
    """Schema-checked output rows as records of ``topic``, partitioned by key (or row)."""
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
    for rec in to_records(good, names):
        raw = dumps(rec)
        if len(raw) > MAX_ROW_BYTES:
            errors.append(ErrorRecord(ds.name, "output-schema", f"{where}: a row of {ds.name} is "
                f"{len(raw):,} bytes as JSON, over the limit of {MAX_ROW_BYTES:,}",
                source.topic, source.partition, source.offset, raw[:4096], where))  # fmt: skip
            continue
        key, part = partition_of_record(rec, keys, partitions, raw)
        out.append(OutRecord(topic, part, key, raw))
    return out, errors
