"""Protobuf values in Confluent's wire format, decoded to rows by the registered file's
descriptor: the base64 ``FileDescriptorProto`` confluent-kafka's serializer registers, or
``.proto`` text compiled by protoc (grpcio-tools); message indexes and well-known types."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

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

from fennel_dagster.engine.jobs.registry_client import Registry
from fennel_dagster.engine.jobs.registry_formats import (
    HEADER_SIZE,
    BadValue,
    header,
    remembered,
    row_of,
)
from fennel_dagster.ops.rows import json_value


class ProtobufRows:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        # schema id -> its file's descriptor, or why it has none (.proto text would
        # otherwise be compiled again for each of its values); (id, message path) -> class
        self._files: dict[int, Any] = {}
        self._types: dict[tuple[int, tuple[int, ...]], type[Message] | BadValue] = {}

    def decode(self, value: bytes) -> dict[str, Any]:
        schema_id = header(value, "Protobuf")
        path, at = _message_indexes(value, HEADER_SIZE)
        cls = remembered(self._types, (schema_id, path), lambda k: self._message_type(*k))
        msg = cls()
        try:
            msg.ParseFromString(value[at:])
        except DecodeError as e:
            raise BadValue(f"the Protobuf payload does not parse as {cls.DESCRIPTOR.full_name} "
                           f"(schema {schema_id}): {e}") from e  # fmt: skip
        return row_of(_message_row(msg))

    def _message_type(self, schema_id: int, path: tuple[int, ...]) -> type[Message]:
        fd = remembered(self._files, schema_id, self._compile)
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
            files = compiled(text, f"schema {schema_id}")
        pool = descriptor_pool.DescriptorPool()
        known = {f.name for f in files}
        for dep in (d for f in files for d in f.dependency if d not in known):
            if not dep.startswith("google/protobuf/"):
                raise BadValue(f"schema {schema_id} imports {dep}, which is neither in it nor a "
                               "well-known type: register one file with its messages")  # fmt: skip
            wk = descriptor_pb2.FileDescriptorProto()
            try:
                descriptor_pool.Default().FindFileByName(dep).CopyToProto(wk)
            except KeyError as e:
                raise BadValue(f"schema {schema_id} imports {dep}, a well-known type this "
                               "engine does not carry: inline what it needs") from e  # fmt: skip
            pool.Add(wk)
            known.add(dep)
        for f in files:
            pool.Add(f)
        return pool.FindFileByName(files[-1].name)


def compiled(text: str, what: str = "the schema") -> list[Any]:
    """``.proto`` text compiled by protoc (grpcio-tools) into file descriptors, imports
    first (the well-known types among them)."""
    from grpc_tools import protoc

    well_known = str(resources.files("grpc_tools") / "_proto")
    with tempfile.TemporaryDirectory(prefix="fd-proto-") as tmp:
        src, out = Path(tmp) / "schema.proto", Path(tmp) / "set.pb"
        src.write_text(text)
        code = protoc.main(["protoc", f"-I{tmp}", f"-I{well_known}", "--include_imports",
                            f"--descriptor_set_out={out}", src.name])  # fmt: skip
        if code != 0 or not out.exists():
            raise BadValue(f"{what} does not compile as a .proto file")
        return list(descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file)


def message_class(text: str, full_name: str) -> type[Message]:
    """The class of message ``full_name`` of ``.proto`` text (a producer's view of a schema)."""
    pool = descriptor_pool.DescriptorPool()
    for f in compiled(text):
        pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(full_name))


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
            return json_value(v.ToDatetime(tzinfo=dt.UTC))
        return _message_row(v)
    return v
