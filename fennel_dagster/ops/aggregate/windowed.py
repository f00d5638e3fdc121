"""Tumbling, hopping and session windows.

Tumbling and hopping windows emit one row per (key, window) once the watermark (the newest
event time seen by the operator) passes the window's end; the row's timestamp is the window
end minus one microsecond (inside the window). Session windows close after ``gap`` of
inactivity measured against the watermark. Events later than an emitted window are counted
as late and dropped from it; they read all of a key's events (no tiles).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from fennel_dagster.ops.aggregate.events import key_events, key_tuples, namespace, record_events
from fennel_dagster.ops.aggregate.layout import US
from fennel_dagster.ops.aggregate.values import aggregate_values
from fennel_dagster.ops.keys import key_prefix, micros
from fennel_dagster.ops.state import OverlayReader, StateReader, WriteBatch
from fennel_dagster.wire import spec


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
        events = key_events(reader, ns, key, None, mark)
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
