"""Error-topic records: a bad row with the reason, where it failed, and its raw payload.

A record always fits the error topic: the topic's ``max.message.bytes`` is set at commit
(``ops.limits``) and a record is at most ``ERROR_RECORD_MAX_BYTES``, below it. A record
that would be bigger (a 1.5 MB message, a huge row) keeps its reason and where it came
from, the payload's first bytes, its full size and SHA-256, and drops the parsed row; the
whole payload stays at its source offset. Without this, one oversized error record fails
the transaction and the runner retries the same batch forever.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from fennel_dagster.engine.messages import ErrorRecord
from fennel_dagster.ops.limits import ERROR_RECORD_MAX_BYTES

MAX_REASON_CHARS = 4000


def encode_error(err: ErrorRecord, limit: int = ERROR_RECORD_MAX_BYTES) -> bytes:
    reason = err.reason
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[:MAX_REASON_CHARS] + f"… ({len(err.reason):,} characters in all)"
    doc: dict[str, Any] = {
        "dataset": err.dataset,
        "stage": err.stage,
        "reason": reason,
        "where": err.where,
        "source": {"topic": err.topic, "partition": err.partition, "offset": err.offset},
        "payload": base64.b64encode(err.payload).decode(),
        "row": err.row,
    }
    try:
        raw = _dumps(doc)
    except RecursionError:  # a parsed row nested about as deep as the parser allows
        doc.update(row=None, row_dropped=True)
        raw = _dumps(doc)
    if len(raw) <= limit:
        return raw
    doc.update(row=None, row_dropped=err.row is not None, payload="", payload_truncated=True,
               payload_bytes=len(err.payload),
               payload_sha256=hashlib.sha256(err.payload).hexdigest())  # fmt: skip
    room = limit - len(_dumps(doc)) - 16
    doc["payload"] = base64.b64encode(err.payload[: max(0, room) * 3 // 4]).decode()
    return _dumps(doc)


def decode_error(data: bytes) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(data)
    out["payload"] = base64.b64decode(out["payload"])
    return out


def _dumps(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True, default=str).encode()
