"""Source job: a user's Kafka topic (or a webhook inbox) -> the dataset's internal topic.

Every message is parsed (a JSON object, or a list of them), unwrapped (Debezium envelopes
for ``cdc="debezium"``), shaped by the source's ``preproc`` and ``where`` exactly like the
mock client does, and checked against the dataset's schema and restrictions. Good rows go to
the dataset topic keyed by the dataset's keys; every row that fails anywhere goes to the
error topic with the stage, the reason, the source offset and the raw payload — never
dropped, never fatal. Rows older than the partition's watermark minus ``disorder`` are late:
counted, and sent to the error topic too. The watermark lives in the hangar, so a replay
classifies exactly the same rows as late. Only honest events move it: a row stamped before
the source's ``earliest`` or further ahead of its arrival (the message's Kafka timestamp)
than ``max_future`` is an error row, so one bad clock cannot push the watermark to 2200.
A value the operators cannot hold (beyond int64, NaN, year 9999, huge text; see
``ops.limits``) is a schema error here, never an exception downstream.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import numpy as np
import pandas as pd

from fennel_dagster.engine.jobs import registry_formats, source_columns
from fennel_dagster.engine.jobs.common import batch_records, partitions_of
from fennel_dagster.engine.messages import ErrorRecord, InMessage, Iteration
from fennel_dagster.ops.keys import micros
from fennel_dagster.ops.limits import MAX_ROW_BYTES, parse_timestamp
from fennel_dagster.ops.rows import base_type, from_records, json_value
from fennel_dagster.ops.schema import _check
from fennel_dagster.ops.source_rules import (
    event_time_problem,
    int_as_text,
    preprocess,
    text_fields,
    where_function,
    where_mask,
)
from fennel_dagster.ops.state import StateReader, WriteBatch
from fennel_dagster.wire import plan, spec

MAX_MESSAGE_BYTES = 1_000_000
_WATERMARK = b"watermark"
_UNREAD = object()  # a message whose value could not be read (its error row is written)


class SourceJob:
    stateful = True

    def __init__(
        self, job: plan.SourceJobSpec, external_partitions: int, registry_auth: str | None = None
    ) -> None:
        self.name = job.name
        self.source = job.source
        self.dataset = job.dataset
        self.topic = job.external_topic
        self.partitions = job.partitions
        self.external_partitions = external_partitions
        self.output = job.output_topic
        self.namespace = f"source:{job.name}"
        self.where = where_function(self.source)
        # Avro / Protobuf values (a schema registry's wire format), else JSON
        self.format = registry_formats.format_of(self.source, registry_auth)
        self._row_kind = registry_formats.row_kind(self.source)
        self._columns = source_columns.takes(self.source)
        self.since = pd.Timestamp(self.source.since) if self.source.since else None
        self.until = pd.Timestamp(self.source.until) if self.source.until else None
        self._ts_name = self.dataset.timestamp
        self._keys = list(self.dataset.keys)
        self._texts = text_fields(self.dataset)
        self._ts_fields = [
            f.name
            for f in self.dataset.fields
            if isinstance(base_type(f.dtype), spec.TimestampType)
        ]

    def input_partitions(self, partition: int) -> list[tuple[str, int]]:
        return [
            (self.topic, q)
            for q in range(self.external_partitions)
            if q % self.partitions == partition
        ]

    # ------------------------------------------------------------------ one batch

    def process(self, messages: list[InMessage], state: StateReader) -> Iteration:
        decoded = self._decoded(messages)
        if self._columns:
            it = self._by_columns(messages, state, decoded)
            if it is not None:
                return it
        return self._row_by_row(messages, state, decoded)

    def _by_columns(
        self,
        messages: list[InMessage],
        state: StateReader,
        decoded: list[registry_formats.Decoded] | None,
    ) -> Iteration | None:
        """The batch judged column by column (``source_columns``), or None when one of its
        rows needs the row-by-row road."""
        docs = (
            source_columns.parse(messages, MAX_MESSAGE_BYTES)
            if decoded is None
            else registry_formats.all_rows(decoded)
        )
        if not docs:
            return None
        cols: dict[str, pd.Series] = {}
        for f in self.dataset.fields:
            col = source_columns.column([d.get(f.name) for d in docs], f.dtype)
            if col is None:
                return None
            cols[f.name] = col
        frame = pd.DataFrame(cols)
        ts_ns = frame[self._ts_name].array.asi8  # type: ignore[attr-defined]
        arrived = np.array([m.timestamp_ms for m in messages], dtype=np.int64) * 1_000_000
        arrived = np.where(arrived > 0, arrived, ts_ns)
        raw_mark = state.get(self.namespace, _WATERMARK)
        keep, problems, mark = source_columns.judge(
            self.source, (self.dataset.name, self._ts_name), ts_ns, arrived,
            int(raw_mark) if raw_mark is not None else None,
            micros(self.since) if self.since is not None else None,
            micros(self.until) if self.until is not None else None,
        )  # fmt: skip
        it = Iteration(writes=WriteBatch())
        it.errors += source_columns.error_rows(
            problems, docs, messages, self._ts_fields, self._ts_name, _iso_utc, self._error
        )
        it.late = sum(1 for _, stage, _ in problems if stage == "late")
        if keep.all():  # the common case: no copy of the frame
            self._emit_frame(frame, messages, None, it)
        elif keep.any():
            picked = np.flatnonzero(keep)
            self._emit_frame(frame.iloc[picked].reset_index(drop=True),
                             [messages[i] for i in picked.tolist()], None, it)  # fmt: skip
        if mark is not None:
            it.writes.put(self.namespace, _WATERMARK, str(mark).encode())
            if it.outputs:
                it.newest_event_us = mark
        return it

    def _decoded(self, messages: list[InMessage]) -> list[registry_formats.Decoded] | None:
        """Each Avro/Protobuf message's row or reason (None: a JSON source, parsed by each
        road its own way)."""
        if self.format is None:
            return None
        return registry_formats.decode_each(self.format, messages, MAX_MESSAGE_BYTES)

    def _row_by_row(
        self,
        messages: list[InMessage],
        state: StateReader,
        decoded: list[registry_formats.Decoded] | None,
    ) -> Iteration:
        it = Iteration(writes=WriteBatch())
        rows: list[tuple[dict[str, Any], InMessage, bool]] = []
        for i, m in enumerate(messages):
            rows += self._parse(m, it, None if decoded is None else decoded[i])
        rows = self._shape(rows, it)
        raw_mark = state.get(self.namespace, _WATERMARK)
        mark = int(raw_mark) if raw_mark is not None else None
        disorder_us = self.source.disorder * 1_000_000
        kept: list[dict[str, Any]] = []
        kept_from: list[InMessage] = []
        kept_deleted: list[bool] = []
        for rec, m, deleted in rows:
            for name in self._texts:  # an int logged into a str field is its text
                if name in rec:
                    rec[name] = int_as_text(rec[name])
            reason = self._check(rec)
            if reason is not None:
                it.errors.append(self._error(m, "schema", reason, rec))
                continue
            self._normalise(rec)
            ts = parse_timestamp(rec[self._ts_name])
            t = micros(ts)
            if self.since is not None and t < micros(self.since):
                continue
            if self.until is not None and t >= micros(self.until):
                continue
            arrived_ns = m.timestamp_ms * 1_000_000 if m.timestamp_ms > 0 else ts.value
            bound = event_time_problem(self.source, self.dataset.name, self._ts_name,
                                       ts.value, arrived_ns)  # fmt: skip
            if bound is not None:
                it.errors.append(self._error(m, "event-time", bound, rec))
                continue
            if mark is not None and t < mark - disorder_us:
                it.late += 1
                it.errors.append(self._error(m, "late", (
                    f"{self.dataset.name}: row at {rec[self._ts_name]} is older than the "
                    f"watermark {pd.Timestamp(mark, unit='us', tz='UTC').isoformat()} minus the "
                    f"source's disorder ({self.source.disorder}s); raise disorder= to accept it"
                ), rec))  # fmt: skip
                continue
            mark = t if mark is None else max(mark, t)
            kept.append({f.name: rec.get(f.name) for f in self.dataset.fields})
            kept_from.append(m)
            kept_deleted.append(deleted)
        if kept:
            self._emit(kept, kept_from, kept_deleted, it)
        if mark is not None:
            it.writes.put(self.namespace, _WATERMARK, str(mark).encode())
            if it.outputs:  # the watermark is the newest event time written
                it.newest_event_us = mark
        return it

    def _emit(
        self,
        rows: list[dict[str, Any]],
        sources: list[InMessage],
        deleted: list[bool],
        it: Iteration,
    ) -> None:
        """Good rows as batch messages of the dataset's topic: by key, or (keyless) to this
        job's partition."""
        self._emit_frame(from_records(rows, self.dataset.fields), sources, deleted, it)

    def _emit_frame(
        self,
        frame: pd.DataFrame,
        sources: list[InMessage],
        deleted: list[bool] | None,
        it: Iteration,
    ) -> None:
        keyless = sources[0].partition % self.partitions
        parts = partitions_of(frame, self._keys, self.partitions, keyless)

        def too_big(row: int, raw: bytes) -> ErrorRecord:
            return self._error(sources[row], "schema", (
                f"{self.dataset.name}: the row is {len(raw):,} bytes as JSON, over the limit "
                f"of {MAX_ROW_BYTES:,}; send smaller rows"
            ), None)  # fmt: skip

        out, errors = batch_records(frame, self.dataset.fields, deleted, parts, self.output,
                                    too_big)  # fmt: skip
        it.outputs += out
        it.errors += errors

    # ------------------------------------------------------------------ stages

    def _parse(
        self, m: InMessage, it: Iteration, decoded: registry_formats.Decoded
    ) -> list[tuple[dict[str, Any], InMessage, bool]]:
        """A message's rows (``decoded``: its Avro/Protobuf row or reason, already decoded)."""
        if m.value is None:
            it.errors.append(self._error(m, "parse", (
                f"a message with a null value (a tombstone, key {m.key!r}) on a source of "
                f"{self.dataset.name}: a row must be {self._row_kind}; to delete a row use "
                'cdc="upsert" with a delete marker or cdc="debezium" with op "d"'
            )))  # fmt: skip
            return []
        if len(m.value) > MAX_MESSAGE_BYTES:
            it.errors.append(self._error(m, "parse", (
                f"message of {len(m.value)} bytes is larger than {MAX_MESSAGE_BYTES}; "
                "split it into rows of their own"
            )))  # fmt: skip
            return []
        if self.format is not None:
            if isinstance(decoded, registry_formats.BadValue):
                it.errors.append(self._error(m, "parse", str(decoded)))
                return []
            doc = decoded
        else:
            doc = self._json(m, it)
            if doc is _UNREAD:
                return []
        docs = doc if isinstance(doc, list) else [doc]
        out: list[tuple[dict[str, Any], InMessage, bool]] = []
        for d in docs:
            if not isinstance(d, dict):
                it.errors.append(self._error(m, "parse", (
                    f"expected a JSON object (one row), got {type(d).__name__}"
                )))  # fmt: skip
                continue
            if self.source.cdc == "debezium":
                row = self._unwrap(d, m, it)
                if row is not None:
                    out.append(row)
            else:
                out.append((d, m, False))
        return out

    def _json(self, m: InMessage, it: Iteration) -> Any:
        """The JSON document a message carries (``_UNREAD``: an error row was added)."""
        assert m.value is not None
        try:
            return json.loads(m.value.decode("utf-8"))
        except UnicodeDecodeError as e:
            it.errors.append(self._error(m, "parse", f"not UTF-8 text: {e}"))
            return _UNREAD
        except ValueError as e:
            it.errors.append(self._error(m, "parse", f"not JSON: {e}"))
            return _UNREAD
        except RecursionError:
            it.errors.append(self._error(m, "parse", (
                "JSON nested deeper than the parser allows (about a thousand levels)"
            )))  # fmt: skip
            return _UNREAD

    def _unwrap(
        self, env: dict[str, Any], m: InMessage, it: Iteration
    ) -> tuple[dict[str, Any], InMessage, bool] | None:
        body = env.get("payload", env) if isinstance(env.get("payload", env), dict) else env
        op = body.get("op")
        if op in ("c", "r", "u") and isinstance(body.get("after"), dict):
            return body["after"], m, False
        if op == "d" and isinstance(body.get("before"), dict):
            return body["before"], m, True
        it.errors.append(self._error(m, "parse", (
            f"not a Debezium change event (op={op!r}): expected op c/r/u with an 'after' row "
            "or op d with a 'before' row"
        ), env))  # fmt: skip
        return None

    def _shape(
        self, rows: list[tuple[dict[str, Any], InMessage, bool]], it: Iteration
    ) -> list[tuple[dict[str, Any], InMessage, bool]]:
        """preproc + where, as the mock client applies them (vectorised over the batch)."""
        if not rows or (not self.source.preproc and self.source.where is None):
            return rows
        try:
            df = preprocess(self.source, pd.DataFrame([r for r, _, _ in rows]))
        except Exception as e:  # noqa: BLE001 - a bad preproc must not stop the stream
            for r, m, _ in rows:
                it.errors.append(self._error(m, "preproc", f"preproc failed: {e}", r))
            return []
        keep = self._where(df, rows, it)
        records = df.to_dict("records")
        return [
            ({k: json_value(v) for k, v in rec.items()}, m, d)
            for rec, (_, m, d), ok in zip(records, rows, keep, strict=True)
            if ok
        ]

    def _where(
        self, df: pd.DataFrame, rows: list[tuple[dict[str, Any], InMessage, bool]], it: Iteration
    ) -> list[bool]:
        try:
            return [bool(x) for x in where_mask(self.source, df, self.where).tolist()]
        except Exception:  # noqa: BLE001 - user code: find the rows that raise, one by one
            if self.where is None:
                raise
            keep = []
            for i, (r, m, _) in enumerate(rows):
                try:
                    keep.append(bool(where_mask(self.source, df.iloc[[i]], self.where).iloc[0]))
                except Exception as e:  # noqa: BLE001
                    keep.append(False)
                    it.errors.append(self._error(m, "user-code", (
                        f"the where= of {self.dataset.name}'s source raised "
                        f"{type(e).__name__}: {e}"
                    ), r))  # fmt: skip
            return keep

    def _check(self, rec: dict[str, Any]) -> str | None:
        missing = [
            f.name
            for f in self.dataset.fields
            if f.name not in rec and not isinstance(f.dtype, spec.OptionalType)
        ]
        if missing:
            return (
                f"{self.dataset.name}: missing field(s) {', '.join(missing)}; send them or "
                "declare them Optional"
            )
        for f in self.dataset.fields:
            why = _check(rec.get(f.name), f.dtype)
            if why:
                shown = json.dumps(rec.get(f.name), default=str)
                shown = shown if len(shown) <= 80 else shown[:77] + "..."
                return f"{self.dataset.name}.{f.name} = {shown} {why}"
        return None

    def _normalise(self, rec: dict[str, Any]) -> None:
        """Timestamps as ISO-8601 UTC (numbers are epoch seconds, naive text is UTC)."""
        for name in self._ts_fields:
            v = rec.get(name)
            if isinstance(v, str | int | float):  # JSON's (checked: not a bool)
                rec[name] = _iso_utc(v)
            elif v is not None:
                rec[name] = json_value(parse_timestamp(v))

    def _error(
        self, m: InMessage, stage: str, reason: str, row: dict[str, Any] | None = None
    ) -> ErrorRecord:
        return ErrorRecord(
            self.dataset.name, stage, reason, m.topic, m.partition, m.offset, m.value or b"",
            f"source {self.source.connector.kind}({self.source.connector.name}) of "
            f"{self.dataset.name}", row,
        )  # fmt: skip


@functools.lru_cache(maxsize=1 << 14, typed=True)
def _iso_utc(value: str | int | float) -> str:
    """A time as the ISO-8601 UTC text rows carry, remembered: the schema check has just
    parsed the same value, and the event time is read back from this text."""
    return str(json_value(parse_timestamp(value)))
