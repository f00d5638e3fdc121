"""Row batches: many rows of one dataset in one internal-topic message, as Arrow IPC.

Why: one JSON message per row made every stage encode and parse each row in Python (the
largest share of the engine's CPU). A batch message holds the rows one job iteration sends to
one partition: a format header, then an Arrow IPC stream whose columns are the dataset's
fields (plus ``__deleted__`` when a row is a tombstone). Readers accept both formats, so a
topic written before batches, or by a producer that still writes JSON rows (Spark's
hand-over, a test), reads as before.

Columns of int, float, bool, text and timestamp fields travel as Arrow's own types; anything
else (lists, maps, structs, decimals, dates, bytes) and any column whose values do not have
the field's type travel as their JSON text, so they decode to exactly the values the JSON row
format gave: the operators and the state see the same rows either way (proven by
``tests/ops/test_batches.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from fennel_dagster.errors import EngineError
from fennel_dagster.ops.columns import UTC_NS
from fennel_dagster.ops.index import DELETED
from fennel_dagster.ops.rows import base_type, dumps, json_column, loads, to_records, typed_series
from fennel_dagster.wire import spec

MAGIC = b"\xffFDB"  # a JSON row starts with "{": never this byte
VERSION = 1
HEADER = MAGIC + bytes([VERSION])
# the encoding of a column travels in its Arrow field's metadata
_ENCODING = b"fd.encoding"
_JSON = b"json"
_JSON_META = {_ENCODING: _JSON}


class BatchFormatError(EngineError, ValueError):
    """A message that claims to be a row batch but is not one this reader knows."""


def is_batch(value: bytes | None) -> bool:
    return value is not None and value[:4] == MAGIC


# a field's Python value types that travel natively from an object column (an int passes for
# a float, as the JSON row format reads it back as one)
_PLAIN: dict[type, tuple[set[type], pa.DataType]] = {
    spec.IntType: ({int, type(None)}, pa.int64()),
    spec.FloatType: ({float, int, type(None)}, pa.float64()),
    spec.BoolType: ({bool, type(None)}, pa.bool_()),
}


def _native(col: pd.Series, dtype: spec.DType) -> pa.Array | None:
    """``col`` as an Arrow array of the field's own type, or None when its values would not
    come back exactly as the JSON row format gives them (they then travel as JSON text)."""
    base = base_type(dtype)
    kind = col.dtype
    if kind.kind == "O" and type(base) in _PLAIN:  # Python values (an aggregate's output)
        allowed, arrow = _PLAIN[type(base)]
        if not set(map(type, col.tolist())) <= allowed:
            return None
        try:
            return pa.array(col.tolist(), type=arrow)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            return None
    try:
        match base:
            case spec.IntType():
                if kind.kind in "iu" or isinstance(kind, pd.Int64Dtype):
                    return pa.array(col, type=pa.int64(), from_pandas=True)
            case spec.FloatType():
                if kind.kind == "f" or isinstance(kind, pd.Float64Dtype):
                    return pa.array(col, type=pa.float64(), from_pandas=True)
            case spec.BoolType():
                if kind.kind == "b" or isinstance(kind, pd.BooleanDtype):
                    return pa.array(col, type=pa.bool_(), from_pandas=True)
            case spec.StringType():
                if kind.kind == "O":
                    return pa.array(col, type=pa.string(), from_pandas=True)
            case spec.TimestampType():
                if kind == UTC_NS:  # as typed rows hold them: no accessor (~0.2 ms each)
                    return pa.array(col, type=pa.timestamp("ns", tz="UTC"), from_pandas=True)
                if isinstance(kind, pd.DatetimeTZDtype):
                    stamps = col.dt.tz_convert("UTC").dt.as_unit("ns")
                    return pa.array(stamps, type=pa.timestamp("ns", tz="UTC"), from_pandas=True)
                if kind.kind == "M":
                    stamps = col.dt.tz_localize("UTC").dt.as_unit("ns")
                    return pa.array(stamps, type=pa.timestamp("ns", tz="UTC"), from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
        return None
    return None


def _as_json(col: pd.Series) -> pa.Array:
    return pa.array([None if v is None else dumps(v) for v in json_column(col)], type=pa.binary())


def to_table(
    rows: pd.DataFrame, fields: Sequence[spec.FieldSpec], deleted: Sequence[bool] | None = None
) -> pa.Table:
    """The Arrow table a batch message of ``rows`` holds (every field a column of it)."""
    arrays: list[pa.Array] = []
    schema: list[pa.Field] = []
    for f in fields:
        col = rows[f.name]
        native = _native(col, f.dtype)
        if native is None:
            arrays.append(_as_json(col))
            schema.append(pa.field(f.name, pa.binary(), metadata=_JSON_META))
        else:
            arrays.append(native)
            schema.append(pa.field(f.name, native.type))
    if deleted is not None and any(deleted):
        arrays.append(pa.array(list(deleted), type=pa.bool_()))
        schema.append(pa.field(DELETED, pa.bool_()))
    return pa.Table.from_arrays(arrays, schema=pa.schema(schema))


def message(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return HEADER + sink.getvalue().to_pybytes()


def messages(table: pa.Table, max_bytes: int) -> list[tuple[bytes, int]]:
    """``table`` as batch messages of at most ``max_bytes`` each, with their row counts
    (halved until they fit; a single row always makes a message of its own)."""
    value = message(table)
    if len(value) <= max_bytes or table.num_rows <= 1:
        return [(value, table.num_rows)]
    mid = table.num_rows // 2
    return messages(table.slice(0, mid), max_bytes) + messages(table.slice(mid), max_bytes)


def encode(
    rows: pd.DataFrame, fields: Sequence[spec.FieldSpec], deleted: Sequence[bool] | None = None
) -> bytes:
    """One batch message of ``rows``."""
    return message(to_table(rows, fields, deleted))


_SCALAR_JSON_BYTES = 40  # the longest JSON of an int, float, bool or UTC timestamp text


def json_bytes_bound(table: pa.Table) -> np.ndarray:
    """For each row, a bound on the size of its JSON row (so only rows that may be over a
    limit are encoded to be measured)."""
    total = np.zeros(table.num_rows, dtype=np.int64)
    for f, column in zip(table.schema, table.columns, strict=True):
        total += len(f.name.encode()) + 4
        if pa.types.is_string(f.type):  # escapes: at most 6 bytes a character
            size = pc.add(pc.multiply(pc.utf8_length(column), 6), 2)
        elif pa.types.is_binary(f.type):  # the JSON text itself
            size = pc.binary_length(column)
        else:
            total += _SCALAR_JSON_BYTES
            continue
        total += pc.fill_null(size, 4).to_numpy(zero_copy_only=False).astype(np.int64)
    return total


def table_of(value: bytes) -> pa.Table:
    """The Arrow table of a batch message."""
    if not is_batch(value):
        raise BatchFormatError("not a row batch (no batch header)")
    version = value[4] if len(value) > 4 else -1
    if version != VERSION:
        raise BatchFormatError(
            f"row batch format version {version}, this reader knows {VERSION}: upgrade the "
            "engine that reads this topic"
        )
    try:
        with pa.ipc.open_stream(pa.py_buffer(value)[5:]) as reader:
            return reader.read_all()
    except (pa.ArrowInvalid, OSError) as e:
        raise BatchFormatError(f"a row batch that Arrow cannot read: {e}") from e


def all_native(table: pa.Table, names: Sequence[str]) -> bool:
    """Whether every one of ``names`` is a column of ``table`` in Arrow's own type."""
    have = set(table.column_names)
    return all(
        n in have and (table.schema.field(n).metadata or {}).get(_ENCODING) != _JSON for n in names
    )


_MAPPER = {pa.int64(): pd.Int64Dtype(), pa.bool_(): pd.BooleanDtype()}


def decode(value: bytes, fields: Sequence[spec.FieldSpec]) -> tuple[pd.DataFrame, np.ndarray]:
    """The rows of a batch message typed as ``ops.rows.from_records`` types them, and their
    delete flags."""
    return frame_of(table_of(value), fields)


def frame_of(table: pa.Table, fields: Sequence[spec.FieldSpec]) -> tuple[pd.DataFrame, np.ndarray]:
    """``decode`` of a table in hand: also how rows that skip a topic are typed exactly as
    the topic would have typed them."""
    n = table.num_rows
    names = set(table.column_names)
    cols: dict[str, pd.Series] = {}
    for f in fields:
        if f.name not in names:  # an Optional field the writer did not know: null
            cols[f.name] = typed_series([None] * n, f.dtype)
            continue
        field = table.schema.field(f.name)
        column = table.column(f.name)
        if (field.metadata or {}).get(_ENCODING) == _JSON:
            cols[f.name] = typed_series(
                [None if v is None else loads(v) for v in column.to_pylist()], f.dtype
            )
        else:
            series = column.to_pandas(types_mapper=_MAPPER.get)
            cols[f.name] = _conform(series, f.dtype)
    frame = pd.DataFrame(cols) if cols else pd.DataFrame(index=pd.RangeIndex(n))
    if DELETED in names:
        deleted = table.column(DELETED).to_numpy(zero_copy_only=False).astype(bool)
    else:
        deleted = np.zeros(n, dtype=bool)
    return frame, deleted


def _conform(series: pd.Series, dtype: spec.DType) -> pd.Series:
    """A native column in the dtype ``typed_series`` gives the field (a writer's column may
    have been float for an int field's nulls, and so on)."""
    match base_type(dtype):
        case spec.IntType():
            return series.astype("Int64")
        case spec.FloatType():
            return series.astype("float64")
        case spec.BoolType():
            return series.astype("boolean")
        case spec.TimestampType():
            return series.astype("datetime64[ns, UTC]")
    return series.astype(object).where(series.notna(), None)


def records(value: bytes, fields: Sequence[spec.FieldSpec] | None = None) -> list[dict[str, Any]]:
    """The rows of a batch message as JSON-safe records, a tombstone marked ``__deleted__``
    as JSON rows mark it. Without ``fields`` the columns are read as the batch holds them."""
    if fields is None:
        fields = _fields_of(table_of(value))
    frame, deleted = decode(value, fields)
    out = to_records(frame, [f.name for f in fields])
    for rec, gone in zip(out, deleted.tolist(), strict=True):
        if gone:
            rec[DELETED] = True
    return out


def rows_of(value: bytes, fields: Sequence[spec.FieldSpec] | None = None) -> list[dict[str, Any]]:
    """The rows of any internal-topic message: a batch's records, or the one JSON row."""
    return records(value, fields) if is_batch(value) else [loads(value)]


def row_count(value: bytes | None) -> int:
    """How many rows an internal-topic message carries (a JSON row or a tombstone: one)."""
    return table_of(value).num_rows if value is not None and is_batch(value) else 1


def split(value: bytes) -> list[bytes]:
    """A batch message as one batch message per row (to set one bad row of it aside)."""
    table = table_of(value)
    return [message(table.slice(i, 1)) for i in range(table.num_rows)]


def _fields_of(table: pa.Table) -> list[spec.FieldSpec]:
    """Field specs read off a batch's own columns (for readers that do not know the dataset)."""
    kinds: dict[pa.DataType, spec.DType] = {
        pa.int64(): spec.IntType(), pa.float64(): spec.FloatType(), pa.bool_(): spec.BoolType(),
        pa.string(): spec.StringType(), pa.timestamp("ns", tz="UTC"): spec.TimestampType(),
    }  # fmt: skip
    out = []
    for f in table.schema:
        if f.name == DELETED:
            continue
        dtype = kinds.get(f.type, _ANY)
        out.append(spec.FieldSpec(f.name, spec.OptionalType(dtype)))
    return out


_ANY: spec.DType = spec.StringType()  # a JSON column read without its dataset: raw JSON values
