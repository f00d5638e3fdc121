"""One dataset's offline table: a Delta table on the platform's object store.

Why Delta (over Iceberg): atomic commits on plain S3 without a catalog service (its log is
files next to the data; the only requirement is a conditional put, which S3 and the local
S3 server both have), and app transactions (``txn`` actions) that record a writer's progress
inside the same commit as its rows, so "which Kafka offsets are in the table" is answered by
the table itself. delta-rs (``deltalake``) writes and reads it without a JVM; Spark reads it
with delta-spark. Iceberg needs a catalog (REST, Hive or JDBC) for atomic commits and has no
per-commit application metadata a reader can look up by key.

Layout: the dataset's fields, then ``__day`` (event date, UTC; the partition column),
``__deleted__`` (a keyed dataset's tombstones) and ``__partition``/``__offset`` (where the
row was on the dataset's topic: what makes "table == topic" checkable).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from fennel_dagster.errors import EngineError
from fennel_dagster.ops.index import DELETED
from fennel_dagster.settings import Settings
from fennel_dagster.wire import plan, spec

DAY = "__day"
PARTITION = "__partition"
OFFSET = "__offset"
META_COLUMNS = (DAY, DELETED, PARTITION, OFFSET)


class TableConflict(EngineError):
    """Another writer committed to the table since this one read it (a zombie or a
    successor): this writer's view of the offsets is stale and it must stop."""


def arrow_type(dtype: spec.DType) -> pa.DataType:
    """The Arrow (and Delta) type a platform dtype is stored as."""
    match dtype:
        case spec.IntType():
            return pa.int64()
        case spec.FloatType():
            return pa.float64()
        case spec.BoolType():
            return pa.bool_()
        case spec.StringType() | spec.RegexType():
            return pa.string()
        case spec.BytesType():
            return pa.binary()
        case spec.TimestampType():
            return pa.timestamp("us", tz="UTC")
        case spec.DateType():
            return pa.date32()
        case spec.DecimalType(scale=scale):
            return pa.decimal128(38, scale)
        case spec.OptionalType(of=inner) | spec.BetweenType(of=inner) | spec.OneOfType(of=inner):
            return arrow_type(inner)
        case spec.ListType(of=inner):
            return pa.list_(arrow_type(inner))
        case spec.MapType(of=inner):
            return pa.map_(pa.string(), arrow_type(inner))
        case spec.EmbeddingType():
            return pa.list_(pa.float64())
        case spec.StructType(fields=fields):
            return pa.struct([pa.field(f.name, arrow_type(f.dtype)) for f in fields])
    raise TypeError(f"no Arrow type for {dtype!r}")


def arrow_schema(ds: spec.DatasetSpec) -> pa.Schema:
    return pa.schema(
        [pa.field(f.name, arrow_type(f.dtype)) for f in ds.fields]
        + [
            pa.field(DAY, pa.string()),
            pa.field(DELETED, pa.bool_()),
            pa.field(PARTITION, pa.int32()),
            pa.field(OFFSET, pa.int64()),
        ]
    )


def storage_options(settings: Settings) -> dict[str, str]:
    """delta-rs' object-store options for the platform's S3 endpoint. Commits rely on S3's
    conditional put (If-None-Match), so concurrent writers conflict instead of overwriting."""
    if settings.s3_url is None:
        return {}
    return {
        "AWS_ENDPOINT_URL": settings.s3_url,
        "AWS_ACCESS_KEY_ID": settings.s3_access_key,
        "AWS_SECRET_ACCESS_KEY": settings.s3_secret_key,
        "AWS_REGION": settings.s3_region,
        "AWS_ALLOW_HTTP": str(settings.s3_url.startswith("http://")).lower(),
        "AWS_FORCE_PATH_STYLE": "true",
        "AWS_CONDITIONAL_PUT": "etag",
    }


@dataclass(frozen=True)
class TablePin:
    """A version of a table and the topic offsets it covers: where a backfill reading that
    version hands over to the stream."""

    version: int | None  # None: no row written yet (a reader reads the topic from its start)
    next_offsets: dict[int, int]  # topic partition -> first offset not in the table


class OfflineTable:
    def __init__(self, settings: Settings, table: plan.OfflineTable) -> None:
        self.settings = settings
        self.dataset = table.dataset
        self.prefix = table.prefix
        self.bucket = table.bucket or settings.s3_bucket  # an S3 sink's, else the platform's
        self.schema = arrow_schema(table.dataset)
        self._options = storage_options(settings)
        self._table: DeltaTable | None = None

    @property
    def uri(self) -> str:
        if self.settings.s3_url is None:
            return str(self.settings.local_object_dir / self.bucket / self.prefix)
        return f"s3://{self.bucket}/{self.prefix.rstrip('/')}"

    @property
    def spark_path(self) -> str:
        """The path Spark reads the table at (S3A)."""
        if self.settings.s3_url is None:
            return self.uri
        return f"s3a://{self.bucket}/{self.prefix.rstrip('/')}"

    def exists(self) -> bool:
        return self._load() is not None

    def _load(self) -> DeltaTable | None:
        if self._table is None:
            try:
                self._table = DeltaTable(self.uri, storage_options=self._options)
            except TableNotFoundError:
                return None
        return self._table

    def committed_offsets(self, topic: str, partitions: int) -> dict[int, int]:
        """Per topic partition, the last offset already in the table (absent: none)."""
        table = self._load()
        if table is None:
            return {}
        out = {}
        for p in range(partitions):
            version = table.transaction_version(_app_id(topic, p))
            if version is not None:
                out[p] = int(version)
        return out

    def pin(self, topic: str, partitions: int) -> TablePin:
        """The table's current version and, per topic partition, the next offset it has not
        got: a reader of that version has exactly the topic's rows before those offsets."""
        table = self._load()
        self._table = None
        if table is None:
            return TablePin(None, {p: 0 for p in range(partitions)})
        nxt = {}
        for p in range(partitions):
            version = table.transaction_version(_app_id(topic, p))
            nxt[p] = 0 if version is None else int(version) + 1
        return TablePin(table.version(), nxt)

    def append(self, rows: pa.Table, offsets: Mapping[tuple[str, int], int]) -> None:
        """Commit ``rows`` and the last offset of each (topic, partition) they came from, in
        one Delta transaction; fails with ``TableConflict`` if another writer got in first."""
        txns = [Transaction(_app_id(t, p), o) for (t, p), o in sorted(offsets.items())]
        target: DeltaTable | str = self._load() or self.uri
        try:
            write_deltalake(
                target,
                rows,
                mode="append",
                partition_by=[DAY],
                storage_options=None if isinstance(target, DeltaTable) else self._options,
                commit_properties=CommitProperties(app_transactions=txns),
            )
        except CommitFailedError as e:
            self._table = None
            raise TableConflict(f"offline table {self.prefix}: {e}") from e
        if isinstance(target, DeltaTable):
            # the new snapshot, a rival's commits included, from the log entries since the
            # one it had (opening the table anew read its checkpoint and every entry after)
            target.update_incremental()
            table = target
        else:
            loaded = self._load()
            assert loaded is not None
            table = loaded
        for (t, p), o in offsets.items():
            if table.transaction_version(_app_id(t, p)) != o:
                raise TableConflict(f"offline table {self.prefix}: {t}[{p}] moved past {o}")

    def expire(self, now: dt.datetime) -> int:
        """Delete the event dates older than the dataset's ``history``; returns rows removed."""
        table = self._load()
        if table is None:
            return 0
        cutoff = (now - dt.timedelta(seconds=self.dataset.history)).date().isoformat()
        metrics = table.delete(f"{DAY} < '{cutoff}'")
        self._table = None
        return int(metrics.get("num_deleted_rows", 0) or 0)

    def read(self, columns: Sequence[str] | None = None, version: int | None = None) -> pa.Table:
        """The whole table, or its ``version`` (small tables: a join's right side, tests,
        inspection; Spark reads big ones)."""
        table = self._load()
        if table is None:
            return self.schema.empty_table()
        self._table = None
        if version is not None:
            table.load_as_version(version)
        return table.to_pyarrow_table(columns=list(columns) if columns else None)

    def files_between(self, since: dt.date | None, until: dt.date | None) -> tuple[int, int]:
        """(data files, bytes) of the event dates in ``[since, until)`` (open ends: all)."""
        table = self._load()
        self._table = None
        if table is None:
            return 0, 0
        adds = pa.table(table.get_add_actions(flatten=True)).to_pydict()  # arro3 -> pyarrow
        days = adds.get(f"partition.{DAY}", [None] * len(adds["size_bytes"]))
        keep = [
            size for size, day in zip(adds["size_bytes"], days, strict=True)
            if (since is None or (day is not None and day >= since.isoformat()))
            and (until is None or (day is not None and day < until.isoformat()))
        ]  # fmt: skip
        return len(keep), int(sum(keep))

    def version(self) -> int | None:
        table = self._load()
        self._table = None
        return None if table is None else table.version()


def to_arrow(
    rows: pd.DataFrame,
    deleted: pd.Series,
    partitions: Sequence[int],
    offsets: Sequence[int],
    ds: spec.DatasetSpec,
) -> pa.Table:
    """Typed rows of ``ds`` (as ``ops.rows.from_records`` makes them) with their table
    columns: event date, tombstone flag, topic partition and offset."""
    schema = arrow_schema(ds)
    cols: dict[str, Any] = {}
    for f in ds.fields:
        kind = schema.field(f.name).type
        values = rows[f.name]
        if pa.types.is_timestamp(kind):  # Delta keeps microseconds: finer digits are dropped
            stamps_ = pd.Series(pd.to_datetime(values, utc=True)).dt.floor("us")
            cols[f.name] = pa.array(stamps_, type=kind)
        else:
            cols[f.name] = pa.array(values.astype(object).where(values.notna(), None), type=kind)
    return _table(cols, schema, ds, deleted.astype(bool).tolist(), partitions, offsets)


def batch_to_arrow(
    rows: pa.Table,
    partitions: Sequence[int] | np.ndarray,
    offsets: Sequence[int] | np.ndarray,
    ds: spec.DatasetSpec,
) -> pa.Table:
    """Rows of batch messages (``ops.batches``; every field in Arrow's own type) with their
    table columns: the same table ``to_arrow`` makes of them, without pandas."""
    schema = arrow_schema(ds)
    cols: dict[str, Any] = {}
    for f in ds.fields:
        kind = schema.field(f.name).type
        column = rows.column(f.name)
        if pa.types.is_timestamp(kind):  # Delta keeps microseconds: finer digits are dropped
            column = pc.floor_temporal(column, unit="microsecond")
        cols[f.name] = column.cast(kind)
    if DELETED in rows.column_names:
        deleted = pc.fill_null(rows.column(DELETED), False).to_pylist()
    else:
        deleted = [False] * rows.num_rows
    return _table(cols, schema, ds, deleted, partitions, offsets)


def records_to_arrow(
    records: Sequence[Mapping[str, Any]],
    deleted: Sequence[bool],
    partitions: Sequence[int],
    offsets: Sequence[int],
    ds: spec.DatasetSpec,
) -> pa.Table | None:
    """``to_arrow(from_records(records, ds.fields), ...)`` straight from our own topics' JSON
    records, with no pandas in between, when every field is an int, float, bool, text or
    timestamp and every value is of the field's own JSON type (a timestamp as the canonical
    UTC text ``json_value`` writes); None otherwise (the caller takes the typed road)."""
    schema = arrow_schema(ds)
    cols: dict[str, Any] = {}
    for f in ds.fields:
        values = [r.get(f.name) for r in records]
        array = _direct(values, f.dtype, schema.field(f.name).type)
        if array is None:
            return None
        cols[f.name] = array
    return _table(cols, schema, ds, list(deleted), partitions, offsets)


# a field's JSON types, and whether an int passes for a float (json_value writes 3.0 as 3.0,
# but a source's row may say 3)
_JSON_TYPES: dict[type, tuple[type, ...]] = {
    spec.IntType: (int,), spec.FloatType: (float, int), spec.BoolType: (bool,),
    spec.StringType: (str,),
}  # fmt: skip
_UTC_TEXT = len("2026-01-01T00:00:00+00:00")  # and 7 more with microseconds


def _direct(values: list[Any], dtype: spec.DType, kind: pa.DataType) -> pa.Array | None:
    base = dtype.of if isinstance(dtype, spec.OptionalType) else dtype
    present = [v for v in values if v is not None]
    if isinstance(base, spec.TimestampType):
        if not all(type(v) is str and v.endswith("+00:00") and len(v) in (_UTC_TEXT,
                   _UTC_TEXT + 7) for v in present):  # fmt: skip
            return None
        naive = [v[:-6] if v is not None else "NaT" for v in values]
        return pa.array(np.array(naive, dtype="datetime64[us]"), type=kind)
    wanted = _JSON_TYPES.get(type(base))
    if wanted is None or not all(type(v) in wanted and v == v for v in present):
        return None  # (a NaN is null on the typed road)
    try:
        return pa.array(values, type=kind)
    except (OverflowError, pa.ArrowInvalid, pa.ArrowTypeError):
        return None  # an int beyond int64: the typed road reports it


def _table(
    cols: dict[str, Any],
    schema: pa.Schema,
    ds: spec.DatasetSpec,
    deleted: list[bool],
    partitions: Sequence[int] | np.ndarray,
    offsets: Sequence[int] | np.ndarray,
) -> pa.Table:
    # the event's UTC date as text (a cast: four times cheaper than strftime, same text)
    cols[DAY] = pc.cast(pc.cast(cols[ds.timestamp], pa.date32()), pa.string())
    cols[DELETED] = pa.array(deleted, type=pa.bool_())
    cols[PARTITION] = pa.array(np.asarray(partitions, dtype=np.int64), type=pa.int32())
    cols[OFFSET] = pa.array(np.asarray(offsets, dtype=np.int64), type=pa.int64())
    return pa.table(cols, schema=schema)


def _app_id(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"
