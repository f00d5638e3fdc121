"""Avro and Protobuf values of a Kafka source, in Confluent's wire format, decoded to rows.

A value is a magic byte 0, the big-endian 4-byte id of its writer's schema in the schema
registry, then (Protobuf only) the path to its message type inside the schema's file as
zigzag varints, then the payload. Schemas are fetched from the registry by id once and kept:
an id names one schema forever. The rows that come out are what a JSON source would give
(timestamps and dates as ISO-8601 text), so every check after parsing is the JSON road's.

A value that cannot be decoded (no header, an id the registry does not know, bytes that do
not match the schema) is a bad row, set aside with its reason. A registry that does not
answer is not the row's fault: ``ServiceUnavailable`` stops the batch, which is retried
whole once the registry is back (``engine.restarts``), so no row is judged without it.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import io
import json
import struct
import tempfile
import threading
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import fastavro
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from google.protobuf import (  # the well-known types a schema may import, in the default pool
    any_pb2,  # noqa: F401
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,  # noqa: F401
    message_factory,
    struct_pb2,  # noqa: F401
    timestamp_pb2,  # noqa: F401
    wrappers_pb2,  # noqa: F401
)
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from fennel_dagster.engine.failures import ServiceUnavailable
from fennel_dagster.engine.messages import InMessage
from fennel_dagster.errors import EngineError
from fennel_dagster.wire import spec

_HEADER = struct.Struct(">bI")
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
    registry = Registry(str(cfg["registry_url"]), auth)
    return AvroRows(registry) if kind == "avro" else ProtobufRows(registry)


def decode_all(
    fmt: RowFormat, messages: list[InMessage], max_bytes: int
) -> list[dict[str, Any]] | None:
    """Each message's row, for the column road; None when one carries no row (the row
    road then sets it aside with its reason)."""
    rows = []
    for m in messages:
        if m.value is None or len(m.value) > max_bytes:
            return None
        try:
            rows.append(fmt.decode(m.value))
        except BadValue:
            return None
    return rows


class Registry:
    """Schemas by id, each fetched once; a client made on first use (a job is built before
    it reads, and building it must not need the registry)."""

    def __init__(self, url: str, auth: str | None) -> None:
        self.url, self.auth = url, auth
        self._client: SchemaRegistryClient | None = None
        self._lock = threading.Lock()

    def schema(self, schema_id: int) -> Schema:
        with self._lock:
            if self._client is None:
                conf = {"url": self.url}
                if self.auth:
                    conf["basic.auth.user.info"] = self.auth
                self._client = SchemaRegistryClient(conf)
            client = self._client
        try:
            return client.get_schema(schema_id)
        except SchemaRegistryError as e:
            if e.http_status_code in (404, 422):
                raise BadValue(
                    f"schema id {schema_id} is not in the registry at {self.url}: the value was "
                    "written with another registry, or its schema was deleted; produce it with "
                    "a serializer of this registry"
                ) from e
            raise ServiceUnavailable(
                f"the schema registry at {self.url} answered {e.http_status_code} for schema "
                f"{schema_id}: {e.error_message}"
            ) from e
        except Exception as e:  # noqa: BLE001 - its HTTP client's errors: the registry's fault
            raise ServiceUnavailable(
                f"the schema registry at {self.url} did not answer ({type(e).__name__}: {e})"
            ) from e


def _header(value: bytes, what: str) -> int:
    if len(value) < _HEADER.size:
        raise BadValue(f"{len(value)} bytes: too short for Confluent's {what} wire format "
                       "(a 0 byte and a 4-byte schema id first)")  # fmt: skip
    magic, schema_id = _HEADER.unpack_from(value)
    if magic != 0:
        raise BadValue(f"first byte {magic}, not 0: not Confluent's {what} wire format (was it "
                       f"produced without the registry's {what} serializer?)")  # fmt: skip
    return int(schema_id)


def plain(v: Any) -> Any:
    """A decoded value as the JSON road would carry it."""
    if isinstance(v, dt.datetime):
        return (v if v.tzinfo else v.replace(tzinfo=dt.UTC)).isoformat()
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [plain(x) for x in v]
    return v


class AvroRows:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._schemas: dict[int, Any] = {}

    def decode(self, value: bytes) -> dict[str, Any]:
        schema_id = _header(value, "Avro")
        parsed = self._schemas.get(schema_id)
        if parsed is None:
            parsed = self._schemas[schema_id] = self._parse(schema_id)
        try:
            row = fastavro.schemaless_reader(io.BytesIO(value[_HEADER.size :]), parsed, None)
        except (EOFError, ValueError, IndexError, struct.error, UnicodeDecodeError) as e:
            raise BadValue(f"the Avro payload does not match schema {schema_id}: {e}") from e
        if not isinstance(row, dict):
            raise BadValue(f"schema {schema_id} is an Avro {type(row).__name__}, not a record: "
                           "a row must be a record with the dataset's fields")  # fmt: skip
        return plain(row)  # type: ignore[no-any-return]

    def _parse(self, schema_id: int) -> Any:
        schema = self.registry.schema(schema_id)
        if (schema.schema_type or "AVRO") != "AVRO":
            raise BadValue(f"schema {schema_id} is {schema.schema_type}, not Avro: the source "
                           "says format Avro")  # fmt: skip
        if schema.references:
            raise BadValue(f"schema {schema_id} references other subjects, which Avro sources "
                           "do not resolve yet: register it with its types inlined")  # fmt: skip
        return fastavro.parse_schema(json.loads(schema.schema_str or "null"))


class ProtobufRows:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._files: dict[int, Any] = {}  # schema id -> its file's descriptor
        self._types: dict[tuple[int, tuple[int, ...]], type[Message]] = {}

    def decode(self, value: bytes) -> dict[str, Any]:
        schema_id = _header(value, "Protobuf")
        path, at = _message_indexes(value, _HEADER.size)
        cls = self._types.get((schema_id, path))
        if cls is None:
            cls = self._types[(schema_id, path)] = self._message_type(schema_id, path)
        msg = cls()
        try:
            msg.ParseFromString(value[at:])
        except DecodeError as e:
            raise BadValue(f"the Protobuf payload does not parse as {cls.DESCRIPTOR.full_name} "
                           f"(schema {schema_id}): {e}") from e  # fmt: skip
        return _message_row(msg)

    def _message_type(self, schema_id: int, path: tuple[int, ...]) -> type[Message]:
        fd = self._files.get(schema_id)
        if fd is None:
            fd = self._files[schema_id] = self._compile(schema_id)
        types: Any = fd.message_types_by_name.values()
        desc: Descriptor | None = None
        for i in path:
            types = list(types)
            if i >= len(types):
                raise BadValue(f"message index path {list(path)} is not in schema {schema_id}")
            desc = types[i]
            types = desc.nested_types
        assert desc is not None
        return message_factory.GetMessageClass(desc)

    def _compile(self, schema_id: int) -> Any:
        """The registered schema's file descriptor, in a pool of its own (two versions of
        one schema share names). A registry keeps a schema as ``.proto`` text, or as the
        base64 ``FileDescriptorProto`` confluent-kafka's serializer registers."""
        schema = self.registry.schema(schema_id)
        if schema.schema_type != "PROTOBUF":
            raise BadValue(f"schema {schema_id} is {schema.schema_type or 'AVRO'}, not "
                           "Protobuf: the source says format Protobuf")  # fmt: skip
        if schema.references:
            raise BadValue(f"schema {schema_id} imports other subjects, which Protobuf sources "
                           "do not resolve yet: register one file with its messages")  # fmt: skip
        text = schema.schema_str or ""
        try:
            files = [descriptor_pb2.FileDescriptorProto.FromString(
                base64.b64decode(text, validate=True))]  # fmt: skip
        except (binascii.Error, DecodeError, ValueError):
            files = _protoc(schema_id, text)
        pool = descriptor_pool.DescriptorPool()
        known = {f.name for f in files}
        for dep in (d for f in files for d in f.dependency if d not in known):
            if not dep.startswith("google/protobuf/"):
                raise BadValue(f"schema {schema_id} imports {dep}, which is neither in it nor a "
                               "well-known type: register one file with its messages")  # fmt: skip
            wk = descriptor_pb2.FileDescriptorProto()
            descriptor_pool.Default().FindFileByName(dep).CopyToProto(wk)
            pool.Add(wk)
            known.add(dep)
        for f in files:
            pool.Add(f)
        return pool.FindFileByName(files[-1].name)


def _protoc(schema_id: int, text: str) -> list[Any]:
    """``.proto`` text compiled by protoc (grpcio-tools), imports first."""
    from grpc_tools import protoc

    well_known = str(resources.files("grpc_tools") / "_proto")
    with tempfile.TemporaryDirectory(prefix="fd-proto-") as tmp:
        src, out = Path(tmp) / f"schema_{schema_id}.proto", Path(tmp) / "set.pb"
        src.write_text(text)
        code = protoc.main(["protoc", f"-I{tmp}", f"-I{well_known}", "--include_imports",
                            f"--descriptor_set_out={out}", src.name])  # fmt: skip
        if code != 0 or not out.exists():
            raise BadValue(f"schema {schema_id} does not compile as a .proto file")
        return list(descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file)


def _message_indexes(value: bytes, at: int) -> tuple[tuple[int, ...], int]:
    """Confluent's message-index path (zigzag varints: a count, then the indexes; a lone 0
    is the first message) and where the payload starts."""
    count, at = _zigzag(value, at)
    if count == 0:
        return (0,), at
    if count < 0 or count > 100:
        raise BadValue(f"a message-index count of {count}: not Confluent's Protobuf format")
    path = []
    for _ in range(count):
        i, at = _zigzag(value, at)
        if i < 0:
            raise BadValue(f"a negative message index {i}: not Confluent's Protobuf format")
        path.append(i)
    return tuple(path), at


def _zigzag(value: bytes, at: int) -> tuple[int, int]:
    raw, shift = 0, 0
    while True:
        if at >= len(value) or shift > 63:
            raise BadValue("the message-index varints run past the value")
        b = value[at]
        at += 1
        raw |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), at


_TIMESTAMP = "google.protobuf.Timestamp"


def _message_row(msg: Message) -> dict[str, Any]:
    """A message's fields by their declared names: scalars as Python values, enums by name,
    ``Timestamp`` as ISO-8601 text, absent fields with presence as None."""
    out: dict[str, Any] = {}
    for f in msg.DESCRIPTOR.fields:
        v = getattr(msg, f.name)
        if f.is_repeated and f.message_type is not None and f.message_type.GetOptions().map_entry:
            out[f.name] = {k: _value(f.message_type.fields_by_name["value"], x)
                           for k, x in v.items()}  # fmt: skip
        elif f.is_repeated:
            out[f.name] = [_value(f, x) for x in v]
        elif f.has_presence and not msg.HasField(f.name):
            out[f.name] = None
        else:
            out[f.name] = _value(f, v)
    return out


def _value(f: FieldDescriptor, v: Any) -> Any:
    if f.type == FieldDescriptor.TYPE_ENUM:
        e = f.enum_type.values_by_number.get(v)
        return e.name if e is not None else v
    if f.type == FieldDescriptor.TYPE_MESSAGE:
        if f.message_type.full_name == _TIMESTAMP:
            return plain(v.ToDatetime(tzinfo=dt.UTC))
        return _message_row(v)
    return v
