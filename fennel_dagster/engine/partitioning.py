"""Which partition a row lives in: one rule for every producer, so jobs are co-partitioned.

A row of a keyed dataset (or a repartition topic) is keyed by ``key_prefix`` of its key
*values* — not names — so ``UserSpend[uid=7]``, a join's ``left_on=uid`` value 7 and a lookup
of ``uid=7`` all land on the same partition. Keyless rows are spread by a hash of the row.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

from fennel_dagster.ops.keys import key_prefix
from fennel_dagster.ops.rows import json_value


def key_bytes(values: Sequence[Any]) -> bytes:
    return key_prefix(tuple(json_value(v) for v in values))


def partition_for(key: bytes, partitions: int) -> int:
    return zlib.crc32(key) % partitions


def partition_of_record(
    record: dict[str, Any], key_fields: Sequence[str], partitions: int, raw: bytes
) -> tuple[bytes | None, int]:
    """(message key, partition) of a row: by its key fields, or by ``raw`` bytes if keyless."""
    if key_fields:
        k = key_prefix(tuple(record.get(f) for f in key_fields))  # records are JSON-safe
        return k, partition_for(k, partitions)
    return None, partition_for(raw, partitions)
