"""Reading an aggregate dataset: which nodes are continuous (looked up as of a time), and their
values as of each query's time."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from fennel_dagster.ops.aggregate.continuous import values_at
from fennel_dagster.ops.aggregate.events import key_tuples, namespace
from fennel_dagster.ops.keys import entry_key, key_prefix, micros
from fennel_dagster.ops.state import StateReader
from fennel_dagster.wire import spec


def is_continuous(node: spec.AggregateNode) -> bool:
    w = node.windowed_by
    return w is not None and w.kind in ("continuous", "forever")


def lookup_aggregate(
    reader: StateReader, scope: str, node: spec.AggregateNode, keys: pd.DataFrame, ts: pd.Series
) -> tuple[pd.DataFrame, pd.Series]:
    """A continuous-window dataset's values as of ``ts``, assembled from tiles and events.

    ``found``: the key has an event at or before ``ts`` (one entry read)."""
    queries = key_tuples(keys, node.keys)
    stamps = [micros(s) for s in pd.to_datetime(ts, utc=True)]
    values, found = aggregate_at(reader, scope, node, queries, stamps)
    return pd.DataFrame(values, columns=[a.into for a in node.aggs]), pd.Series(found, dtype=bool)


def aggregate_at(
    reader: StateReader,
    scope: str,
    node: spec.AggregateNode,
    queries: Sequence[tuple[Any, ...]],
    stamps_us: Sequence[int],
) -> tuple[dict[str, list[Any]], list[bool]]:
    """``lookup_aggregate`` on state keys (``key_tuples``) and times in µs, as lists: the
    lookup endpoint answers a few keys, where building frames costs more than the reads."""
    ns = namespace(scope, node)
    found = [
        next(iter(reader.scan(ns, key_prefix(k), entry_key(k, t + 1, 0))), None) is not None
        for k, t in zip(queries, stamps_us, strict=True)
    ]
    return values_at(reader, ns, node, queries, stamps_us), found
