"""The wire format: the IR of declared entities and its canonical encoding."""

from fennel_dagster.wire.codec import WireError, content_hash, decode, encode

__all__ = ["WireError", "content_hash", "decode", "encode"]
