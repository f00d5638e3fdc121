"""Canonical bytes for the IR in ``wire.spec``.

Every IR value encodes to JSON with a ``"@"`` tag naming its class, keys sorted and no
whitespace, so the same declaration always yields the same bytes (and hence the same hash).
Decoding checks the wire version and rebuilds the frozen dataclasses exactly.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import typing
from typing import Any

from fennel_dagster.errors import WireFailed
from fennel_dagster.wire import plan, spec

_CLASSES: dict[str, type] = {
    name: obj
    for module in (spec, plan)
    for name, obj in vars(module).items()
    if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == module.__name__
}


class WireError(WireFailed, ValueError):
    """Bytes that are not a valid encoding of the IR (wrong version, unknown tag, bad shape)."""


def to_jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {"@": type(value).__name__}
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            if f.metadata == spec.OMITTED_WHEN_DEFAULT and v == f.default:
                continue
            out[f.name] = to_jsonable(v)
        return out
    if isinstance(value, tuple | list):
        return [to_jsonable(v) for v in value]
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return {"@float": repr(value)}
        return value
    raise WireError(f"cannot encode {type(value).__name__} {value!r}: the IR holds only plain data")


def from_jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        if "@float" in value:
            return float(value["@float"])
        tag = value.get("@")
        cls = _CLASSES.get(tag) if isinstance(tag, str) else None
        if cls is None:
            raise WireError(f"unknown IR tag {tag!r}")
        kwargs = {k: from_jsonable(v) for k, v in value.items() if k != "@"}
        try:
            return cls(**kwargs)
        except TypeError as e:
            raise WireError(f"bad fields for {tag}: {e}") from e
    if isinstance(value, list):
        return tuple(from_jsonable(v) for v in value)
    return value


def encode(value: Any) -> bytes:
    """Canonical bytes of an IR value (any dataclass of ``wire.spec`` or ``wire.plan``)."""
    doc = {"wire_version": spec.WIRE_VERSION, "value": to_jsonable(value)}
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def decode(data: bytes) -> Any:
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WireError(f"not a fennel_dagster wire document: {e}") from e
    version = doc.get("wire_version") if isinstance(doc, dict) else None
    if version != spec.WIRE_VERSION:
        raise WireError(
            f"wire version {version!r} is not supported (this server speaks {spec.WIRE_VERSION}): "
            "upgrade the client or the server so both speak the same version"
        )
    return from_jsonable(doc["value"])


def content_hash(value: Any) -> str:
    """A stable hex digest of an IR value's canonical bytes."""
    return hashlib.sha256(encode(value)).hexdigest()


def type_hints_of(cls: type) -> dict[str, Any]:
    """Resolved field annotations of an IR class (for property-test strategies)."""
    return typing.get_type_hints(cls, vars(spec))
