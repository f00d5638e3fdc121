"""Avro and Protobuf values of a Kafka source, in Confluent's wire format, decoded to rows.

A value is a magic byte 0, the big-endian 4-byte id of its writer's schema in the schema
registry, then (Protobuf only) the path to its message type inside the schema's file as
zigzag varints, then the payload. Schemas are fetched from the registry by id once and kept:
an id names one schema forever. The rows that come out are what a JSON source would give
(timestamps and dates as ISO-8601 text), so every check after parsing is the JSON road's.

This module stays light (a source job imports it whatever its format): the decoders live in
``avro_values`` and ``protobuf_values``, the registry's client in ``registry_client``.

A value that cannot be decoded (no header, an id the registry does not know, bytes that do
not match the schema) is a bad row, set aside with its reason. A registry that does not
answer is not the row's fault: ``ServiceUnavailable`` stops the batch, which is retried
whole once the registry is back (``engine.restarts``), so no row is judged without it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from fennel_dagster.engine.messages import InMessage
from fennel_dagster.errors import EngineError
from fennel_dagster.ops.rows import json_value
from fennel_dagster.wire import spec

_HEADER = struct.Struct(">bI")
HEADER_SIZE = _HEADER.size  # the magic byte and the schema id
FORMATS = ("avro", "protobuf")


class BadValue(EngineError, ValueError):
    """This value cannot be decoded: the reason names what is wrong and how to fix it."""


class RowFormat(Protocol):
    def decode(self, value: bytes) -> dict[str, Any]:
        """The row a value carries; ``BadValue`` when it carries none."""
        ...


def format_of(source: spec.SourceSpec, auth: str | None = None) -> RowFormat | None:
    """The decoder of a Kafka source's values, or None for JSON (the default road)."""
    cfg = dict(source.connector.config)
    kind = cfg.get("format", "json")
    if source.connector.kind != "kafka" or kind not in FORMATS:
        return None
    # imported here: their libraries take about a second to import, which every runner
    # process (and each Dagster run of one) would pay for JSON sources too
    from fennel_dagster.engine.jobs.registry_client import Registry

    registry = Registry(str(cfg["registry_url"]), auth)
    if kind == "avro":
        from fennel_dagster.engine.jobs.avro_values import AvroRows

        return AvroRows(registry)
    from fennel_dagster.engine.jobs.protobuf_values import ProtobufRows

    return ProtobufRows(registry)


def row_kind(source: spec.SourceSpec) -> str:
    """What one of the source's values holds, as its errors name it."""
    kind = dict(source.connector.config).get("format")
    return {"avro": "an Avro record", "protobuf": "a Protobuf message"}.get(
        str(kind), "a JSON object"
    )


Decoded = dict[str, Any] | BadValue | None


def decode_each(fmt: RowFormat, messages: list[InMessage], max_bytes: int) -> list[Decoded]:
    """Each message's row, or the ``BadValue`` saying why it carries none (None: no value,
    or too big to decode, which the row road reports). Decoded once per batch: the column
    road takes the rows when all are good, the row road the rows and the reasons."""
    out: list[Decoded] = []
    for m in messages:
        if m.value is None or len(m.value) > max_bytes:
            out.append(None)
            continue
        try:
            out.append(fmt.decode(m.value))
        except BadValue as e:
            out.append(e)
    return out


def all_rows(decoded: list[Decoded]) -> list[dict[str, Any]] | None:
    """The rows for the column road, or None when a message carries none."""
    rows = [d for d in decoded if isinstance(d, dict)]
    return rows if len(rows) == len(decoded) else None


K = TypeVar("K")
V = TypeVar("V")


def remembered(cache: dict[K, V | BadValue], key: K, make: Callable[[K], V]) -> V:
    """``make(key)``, made once: a ``BadValue`` is kept too and raised again (an id names one
    schema forever, and each of its values would otherwise ask the registry again)."""
    got = cache.get(key)
    if got is None:
        try:
            got = cache[key] = make(key)
        except BadValue as e:
            got = cache[key] = e
    if isinstance(got, BadValue):
        raise BadValue(str(got))
    return got


_AS_IS = frozenset({str, int, bool, type(None)})


def row_of(decoded: dict[str, Any]) -> dict[str, Any]:
    """A decoded record as a JSON value would give it (``rows.json_value`` of it), in place:
    only the values JSON has no type for (times, dates, decimals, nested values) and NaN
    are converted; the rest, most of a row, is left as it is."""
    for k, v in decoded.items():
        t = type(v)
        if t in _AS_IS or (t is float and v == v):
            continue
        decoded[k] = json_value(v)
    return decoded


def header(value: bytes, what: str) -> int:
    """The schema id of a value in Confluent's framing (``BadValue`` when it is not)."""
    if len(value) < _HEADER.size:
        raise BadValue(f"{len(value)} bytes: too short for Confluent's {what} wire format "
                       "(a 0 byte and a 4-byte schema id first)")  # fmt: skip
    magic, schema_id = _HEADER.unpack_from(value)
    if magic != 0:
        raise BadValue(f"first byte {magic}, not 0: not Confluent's {what} wire format (was it "
                       f"produced without the registry's {what} serializer?)")  # fmt: skip
    return int(schema_id)
