"""Avro values in Confluent's wire format, decoded to rows (fastavro)."""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import fastavro

from fennel_dagster.engine.jobs.registry_client import Registry
from fennel_dagster.engine.jobs.registry_formats import (
    HEADER_SIZE,
    BadValue,
    header,
    remembered,
    row_of,
)


class AvroRows:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._schemas: dict[int, Any] = {}  # schema id -> its parsed schema, or why none

    def decode(self, value: bytes) -> dict[str, Any]:
        schema_id = header(value, "Avro")
        parsed = remembered(self._schemas, schema_id, self._parse)
        try:
            row = fastavro.schemaless_reader(io.BytesIO(value[HEADER_SIZE:]), parsed, None)
        except (EOFError, ValueError, IndexError, struct.error, UnicodeDecodeError) as e:
            raise BadValue(f"the Avro payload does not match schema {schema_id}: {e}") from e
        if not isinstance(row, dict):
            raise BadValue(f"schema {schema_id} is an Avro {type(row).__name__}, not a record: "
                           "a row must be a record with the dataset's fields")  # fmt: skip
        return row_of(row)

    def _parse(self, schema_id: int) -> Any:
        schema = self.registry.schema(schema_id)
        if (schema.schema_type or "AVRO") != "AVRO":
            raise BadValue(f"schema {schema_id} is {schema.schema_type}, not Avro: the source "
                           "says format Avro")  # fmt: skip
        if schema.references:
            raise BadValue(f"schema {schema_id} references other subjects, which Avro sources "
                           "do not resolve yet: register it with its types inlined")  # fmt: skip
        try:
            return fastavro.parse_schema(json.loads(schema.schema_str or "null"))
        except (ValueError, fastavro.schema.SchemaParseException) as e:
            raise BadValue(f"schema {schema_id} is not an Avro schema fastavro reads: {e}") from e
