"""``groupby(...).aggregate(...)``: windowed aggregations over per-key event history.

State layout: namespace ``agg:<pipeline>:<node>``; one entry per input event under
``entry_key(group key, event time, content seq)`` holding the fields the aggregations read.

Exactness. Continuous windows are exact: the value at time ``t`` aggregates exactly the
events of the key with event time in ``(t - duration, t]`` (``forever``: all up to ``t``),
whatever order they arrived in. It is assembled on read from the stored events (the same
function answers eager emission, lookups and the Spark path's reference), so a late event
inside the source's ``disorder`` changes every later lookup, while rows already emitted are
not retracted. Quantile is exact (the nearest-rank "lower" method) even with ``approx=True``;
Count(unique, approx=True) is exact too. Stddev is the population standard deviation.

Tumbling and hopping windows emit one row per (key, window) once the watermark (the newest
event time seen by the operator) passes the window's end; the row's timestamp is the window
end minus one microsecond (inside the window). Session windows close after ``gap`` of
inactivity measured against the watermark. Events later than an emitted window are counted
as late and dropped from it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from fennel_dagster.ops.keys import entry_key, key_prefix, micros, split_entry
from fennel_dagster.ops.rows import content_seq, dumps, json_value, loads
from fennel_dagster.ops.state import OverlayReader, StateReader, WriteBatch
from fennel_dagster.wire import spec

US = 1_000_000


def namespace(scope: str, node: spec.AggregateNode) -> str:
    return f"agg:{scope}:{node.id}"


def _of_columns(node: spec.AggregateNode) -> list[str]:
    return sorted({a.of for a in node.aggs if a.of})


def _window_bounds(w: spec.WindowSpec) -> int | None:
    """How far back (seconds) a continuous window reaches; None for forever."""
    return None if w.kind == "forever" else w.duration


def is_continuous(node: spec.AggregateNode) -> bool:
    return all(a.window.kind in ("continuous", "forever") for a in node.aggs)


def record_events(
    node: spec.AggregateNode,
    ns: str,
    df: pd.DataFrame,
    ts_col: str,
    state: StateReader,
    wb: WriteBatch,
) -> None:
    """Store each event once; identical events get consecutive sequence numbers, so they count
    as many times as they occur whatever the batching."""
    reader = OverlayReader(state, wb)
    cols = _of_columns(node)
    keys = key_tuples(df, node.keys)
    stamps = pd.to_datetime(df[ts_col], utc=True).tolist()
    values = {c: df[c].tolist() for c in cols}
    for i, (kv, stamp) in enumerate(zip(keys, stamps, strict=True)):
        rec = {c: json_value(values[c][i]) for c in cols}
        seq = content_seq({**rec, "_k": list(kv)})
        while reader.get(ns, entry_key(kv, micros(stamp), seq)) is not None:
            seq += 1
        wb.put(ns, entry_key(kv, micros(stamp), seq), dumps(rec))


def key_tuples(df: pd.DataFrame, keys: Sequence[str]) -> list[tuple[Any, ...]]:
    """Each row's group key as a tuple of JSON-safe values (the state key's prefix)."""
    rows = df[list(keys)].astype(object).to_numpy().tolist()
    return [tuple(json_value(v) for v in row) for row in rows]


def _events(
    reader: StateReader, ns: str, key: tuple[Any, ...], lo_us: int | None, hi_us: int
) -> list[tuple[int, dict[str, Any]]]:
    prefix = key_prefix(key)
    start = prefix if lo_us is None else entry_key(key, lo_us + 1, 0)
    end = entry_key(key, hi_us, 2**64 - 1)
    out = []
    for k, v in reader.scan(ns, start, end):
        out.append((split_entry(k)[0], loads(v)))
    return out


def aggregate_values(agg: spec.AggSpec, values: Sequence[Any], stamps: Sequence[int]) -> Any:
    """One aggregation over one window's events (``values`` in event-time order)."""
    vals = list(values)
    present = [v for v in vals if v is not None]
    match agg.kind:
        case "count":
            if agg.unique:
                return len({json.dumps(v, sort_keys=True) for v in present})
            return len(present) if agg.dropnull else len(vals)
        case "sum":
            return sum(present) if present else 0
        case "avg":
            return float(np.mean(present)) if present else agg.default
        case "min":
            return min(present) if present else agg.default
        case "max":
            return max(present) if present else agg.default
        case "stddev":
            return float(np.std(present)) if present else agg.default
        case "quantile":
            if not present:
                return agg.default
            return float(
                np.quantile(np.asarray(present, dtype=float), agg.p or 0.0, method="lower")
            )
        case "distinct":
            uniq = {json.dumps(v, sort_keys=True): v for v in (present if agg.dropnull else vals)}
            return [uniq[k] for k in sorted(uniq)]
        case "lastk" | "firstk":
            seq = vals[::-1] if agg.kind == "lastk" else vals
            if agg.dropnull:
                seq = [v for v in seq if v is not None]
            if agg.dedup:
                seen: set[str] = set()
                unique = []
                for v in seq:
                    tag = json.dumps(v, sort_keys=True)
                    if tag not in seen:
                        seen.add(tag)
                        unique.append(v)
                seq = unique
            return seq[: agg.limit]
    raise ValueError(f"unknown aggregation {agg.kind!r}")


def values_at(
    reader: StateReader,
    ns: str,
    node: spec.AggregateNode,
    keys: Sequence[tuple[Any, ...]],
    stamps_us: Sequence[int],
) -> dict[str, list[Any]]:
    """Each continuous aggregation of ``node`` for each (key, time) query."""
    reach = [_window_bounds(a.window) for a in node.aggs]
    widest = None if any(r is None for r in reach) else max(r for r in reach if r is not None)
    out: dict[str, list[Any]] = {a.into: [] for a in node.aggs}
    for key, t in zip(keys, stamps_us, strict=True):
        events = _events(reader, ns, key, None if widest is None else t - widest * US, t)
        for agg, r in zip(node.aggs, reach, strict=True):
            window = events if r is None else [(s, e) for s, e in events if s > t - r * US]
            out[agg.into].append(
                aggregate_values(
                    agg, [e.get(agg.of) if agg.of else 1 for _, e in window], [s for s, _ in window]
                )
            )
    return out


def lookup_aggregate(
    reader: StateReader, scope: str, node: spec.AggregateNode, keys: pd.DataFrame, ts: pd.Series
) -> tuple[pd.DataFrame, pd.Series]:
    """A continuous-window dataset's values as of ``ts``: assembled from its events."""
    ns = namespace(scope, node)
    queries = key_tuples(keys, node.keys)
    stamps = [micros(s) for s in pd.to_datetime(ts, utc=True)]
    found = []
    for key, t in zip(queries, stamps, strict=True):
        found.append(bool(_events(reader, ns, key, None, t)))
    return pd.DataFrame(values_at(reader, ns, node, queries, stamps)), pd.Series(found, dtype=bool)


def run_continuous(
    node: spec.AggregateNode,
    scope: str,
    df: pd.DataFrame,
    ts_col: str,
    state: StateReader,
    wb: WriteBatch,
) -> pd.DataFrame:
    """Record the batch's events; emit one row per event with the aggregates as of its time."""
    ns = namespace(scope, node)
    record_events(node, ns, df, ts_col, state, wb)
    reader = OverlayReader(state, wb)
    keys = key_tuples(df, node.keys)
    stamps = [micros(s) for s in pd.to_datetime(df[ts_col], utc=True)]
    values = values_at(reader, ns, node, keys, stamps)
    out = df[list(node.keys)].reset_index(drop=True).copy()
    for into, col in values.items():
        out[into] = pd.Series(col, dtype=object)
    out[ts_col] = pd.to_datetime(df[ts_col], utc=True).reset_index(drop=True)
    return out


def _window_starts(w: spec.WindowSpec, t_us: int) -> list[int]:
    size, stride = (w.duration or 0) * US, (w.stride or w.duration or 0) * US
    first = (t_us - size) // stride * stride + stride
    return [
        s
        for s in range(max(first, 0) if t_us >= 0 else first, t_us + 1, stride)
        if s <= t_us < s + size
    ]


def run_windowed(
    node: spec.AggregateNode,
    scope: str,
    df: pd.DataFrame,
    ts_col: str,
    state: StateReader,
    wb: WriteBatch,
) -> tuple[pd.DataFrame, int]:
    """Tumbling/hopping/session: record events, emit windows the watermark has closed."""
    ns = namespace(scope, node)
    meta_ns = ns + ":meta"
    window = node.aggs[0].window
    reader = OverlayReader(state, wb)
    raw_mark = reader.get(meta_ns, b"watermark")
    old_mark = int(raw_mark) if raw_mark else None
    stamps = [micros(s) for s in pd.to_datetime(df[ts_col], utc=True)]
    keys = key_tuples(df, node.keys)
    late = sum(1 for s in stamps if old_mark is not None and _closed_before(window, s, old_mark))
    keep = [old_mark is None or not _closed_before(window, s, old_mark) for s in stamps]
    record_events(node, ns, df[keep], ts_col, state, wb)
    mark = max([*stamps, old_mark or -(2**62)])
    wb.put(meta_ns, b"watermark", str(mark).encode())
    touched = sorted({k for k, ok in zip(keys, keep, strict=True) if ok})
    rows: list[dict[str, Any]] = []
    reader = OverlayReader(state, wb)
    for key in touched:
        events = _events(reader, ns, key, None, mark)
        for start, end in _windows(window, [s for s, _ in events]):
            done_key = key_prefix(key) + str(start).encode()
            if end > mark or reader.get(meta_ns, done_key) is not None:
                continue
            wb.put(meta_ns, done_key, b"1")
            inside = [(s, e) for s, e in events if start <= s < end]
            row: dict[str, Any] = dict(zip(node.keys, key, strict=True))
            for agg in node.aggs:
                row[agg.into] = aggregate_values(
                    agg, [e.get(agg.of) if agg.of else 1 for _, e in inside], [s for s, _ in inside]
                )
            row[ts_col] = pd.Timestamp(end - 1, unit="us", tz="UTC")
            rows.append(row)
    columns = [*node.keys, *(a.into for a in node.aggs), ts_col]
    return pd.DataFrame(rows, columns=columns), late


def _closed_before(w: spec.WindowSpec, t_us: int, mark: int) -> bool:
    if w.kind == "session":
        return False  # a late event can always open or extend a session of its own
    return all(s + (w.duration or 0) * US <= mark for s in _window_starts(w, t_us))


def _windows(w: spec.WindowSpec, stamps: list[int]) -> list[tuple[int, int]]:
    if w.kind == "session":
        out: list[tuple[int, int]] = []
        gap = (w.gap or 0) * US
        for s in sorted(stamps):
            if out and s < out[-1][1]:
                out[-1] = (out[-1][0], s + gap)
            else:
                out.append((s, s + gap))
        return out
    spans = {(s, s + (w.duration or 0) * US) for t in stamps for s in _window_starts(w, t)}
    return sorted(spans)
