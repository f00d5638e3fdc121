"""Error-topic records: a bad row with the reason, where it failed, and its raw payload."""

from __future__ import annotations

import base64
import json
from typing import Any

from fennel_dagster.engine.messages import ErrorRecord


def encode_error(err: ErrorRecord) -> bytes:
    return json.dumps(
        {
            "dataset": err.dataset,
            "stage": err.stage,
            "reason": err.reason,
            "where": err.where,
            "source": {"topic": err.topic, "partition": err.partition, "offset": err.offset},
            "payload": base64.b64encode(err.payload).decode(),
            "row": err.row,
        },
        sort_keys=True,
        default=str,
    ).encode()


def decode_error(data: bytes) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(data)
    out["payload"] = base64.b64decode(out["payload"])
    return out
