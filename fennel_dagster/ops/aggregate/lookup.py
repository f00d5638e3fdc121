"""Reading an aggregate dataset: which nodes are continuous (looked up as of a time), and their
values as of each query's time."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from fennel_dagster.ops.aggregate.continuous import values_at
from fennel_dagster.ops.aggregate.events import key_tuples, namespace
from fennel_dagster.ops.keys import entry_key, key_prefix, micros, split_entry
from fennel_dagster.ops.state import StateReader
from fennel_dagster.wire import spec


def is_continuous(node: spec.AggregateNode) -> bool:
    w = node.windowed_by
    return w is not None and w.kind in ("continuous", "forever")


def lookup_aggregate(
    reader: StateReader, scope: str, node: spec.AggregateNode, keys: pd.DataFrame, ts: pd.Series
) -> tuple[pd.DataFrame, pd.Series, list[int | None]]:
    """A continuous-window dataset's values as of ``ts``, assembled from tiles and events.

    ``found``: the key has an event at or before ``ts`` (one entry read); the third item:
    when each key's row took the value it has at ``ts`` (``changed_at``)."""
    queries = key_tuples(keys, node.keys)
    stamps = [micros(s) for s in pd.to_datetime(ts, utc=True)]
    values, found, changed = aggregate_at(reader, scope, node, queries, stamps)
    frame = pd.DataFrame(values, columns=[a.into for a in node.aggs])
    return frame, pd.Series(found, dtype=bool), changed


def aggregate_at(
    reader: StateReader,
    scope: str,
    node: spec.AggregateNode,
    queries: Sequence[tuple[Any, ...]],
    stamps_us: Sequence[int],
) -> tuple[dict[str, list[Any]], list[bool], list[int | None]]:
    """``lookup_aggregate`` on state keys (``key_tuples``) and times in µs, as lists: the
    lookup endpoint answers a few keys, where building frames costs more than the reads."""
    ns = namespace(scope, node)
    changed = [changed_at(reader, ns, node, k, t) for k, t in zip(queries, stamps_us, strict=True)]
    found = [c is not None for c in changed]
    return values_at(reader, ns, node, queries, stamps_us), found, changed


def changed_at(
    reader: StateReader, ns: str, node: spec.AggregateNode, key: tuple[Any, ...], t: int
) -> int | None:
    """When ``key``'s row took the value it has at ``t`` (µs), as Fennel's lookups give an
    aggregate's timestamp: the newest time at or before ``t`` at which an event entered one
    of its windows (its event time) or left one (a window of duration ``d`` holds
    ``[t - d, t]``, so an event at ``e`` leaves at ``e + d + 1 µs``). None: no event at or
    before ``t`` (the key is not found). One seek per distinct window duration."""
    prefix = key_prefix(key)
    newest = reader.last(ns, prefix, entry_key(key, t + 1, 0))
    if newest is None:
        return None
    at = split_entry(newest[0])[0]
    spans = {a.window.duration for a in node.aggs if a.window.kind == "continuous"}
    for d in sorted(s for s in spans if s):
        span = d * 1_000_000
        gone = reader.last(ns, prefix, entry_key(key, t - span, 0))  # events before t - d
        if gone is not None:
            at = max(at, split_entry(gone[0])[0] + span + 1)
    return at
