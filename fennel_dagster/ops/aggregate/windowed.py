"""Tumbling, hopping and session windows.

Tumbling and hopping windows emit one row per (key, window) once the watermark (the newest
event time seen by the operator) passes the window's end; the row's timestamp is the window
end minus one microsecond (inside the window); with a ``lookback``, both that much later.
After a key's last window with events, the next one (empty) is emitted too, with its
aggregations over nothing (a count of 0): a lookup after a quiet spell answers the window
that just closed, as Fennel's does, not the last one that held events; later empty windows
would repeat that row, so none is emitted. ``Hopping("forever", stride)`` holds every event
before each stride's end: a key's row is emitted at the end of each stride it had events in.
Session windows close after more than ``gap`` of
inactivity measured against the watermark. Events later than an emitted window are counted
as late and dropped from it; they read all of a key's events (no tiles).

A window closes when the watermark passes its end whichever key moved the watermark: each
recorded event leaves a timer (``<ns>:timers``, ordered by window end) and a batch fires
every timer the new watermark has passed, so a key that falls silent still gets its last
windows emitted. ``watermark=`` advances the watermark without events (Spark closes each
partition's windows at the end of a backfill with the history's newest time).

``groupby(..., window=...)`` makes the window a key: each row carries it as a ``Window``
(``begin``, ``end``), as Fennel's do. A tumbling or hopping window's row is stamped at its
end. A session's window ends a microsecond after its last event, and its row is stamped
there; with ``emit="eager"`` (the default) a session is emitted as it grows, each extent a
key of its own, as Fennel shows open sessions; with ``emit="final"`` once it closes.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from fennel_dagster.ops.aggregate.events import key_events, key_tuples, namespace, record_events
from fennel_dagster.ops.aggregate.layout import US
from fennel_dagster.ops.aggregate.values import aggregate_values
from fennel_dagster.ops.keys import key_prefix, micros
from fennel_dagster.ops.state import OverlayReader, StateReader, WriteBatch
from fennel_dagster.wire import spec

FOREVER_START = -(2**62)  # where a Hopping("forever") window begins: before any event


def _forever(w: spec.WindowSpec) -> bool:
    """``Hopping("forever", stride)``: every event before each stride's end."""
    return w.kind == "hopping" and w.duration is None


def _window_starts(w: spec.WindowSpec, t_us: int) -> list[int]:
    """The starts of the tumbling or hopping windows holding an event at ``t_us``."""
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
    watermark: int | None = None,
) -> tuple[pd.DataFrame, int]:
    """Tumbling/hopping/session: record events, emit windows the watermark has closed."""
    ns = namespace(scope, node)
    meta_ns = ns + ":meta"
    timers_ns = timers_namespace(ns)
    window = _window(node)
    reader = OverlayReader(state, wb)
    raw_mark = reader.get(meta_ns, b"watermark")
    old_mark = int(raw_mark) if raw_mark else None
    stamps = [micros(s) for s in pd.to_datetime(df[ts_col], utc=True)]
    keys = key_tuples(df, node.keys)
    late = sum(1 for s in stamps if old_mark is not None and _closed_before(window, s, old_mark))
    keep = [old_mark is None or not _closed_before(window, s, old_mark) for s in stamps]
    record_events(node, ns, df[np.array(keep, dtype=bool)], ts_col, state, wb)
    for key, stamp, ok in zip(keys, stamps, keep, strict=True):
        if ok:
            timer = _timer(_first_end(window, stamp)) + key_prefix(key)
            wb.put(timers_ns, timer, json.dumps(key).encode())
    known = [m for m in (old_mark, watermark) if m is not None]
    mark = max([*stamps, *known, -(2**62)])
    wb.put(meta_ns, b"watermark", str(mark).encode())
    reader = OverlayReader(state, wb)
    rows: list[dict[str, Any]] = []
    growing = _grows(node)
    if growing:
        touched: dict[tuple[Any, ...], list[int]] = {}
        for key, stamp, ok in zip(keys, stamps, keep, strict=True):
            if ok:
                touched.setdefault(key, []).append(stamp)
        for key in sorted(touched, key=repr):
            rows.extend(_grown_sessions(node, ns, key, touched[key], mark, ts_col, reader))
    due = set()
    for timer, raw_key in reader.scan(timers_ns, b"", _timer(mark + 1)):
        due.add(tuple(json.loads(raw_key)))
        wb.delete(timers_ns, timer)
    for key in sorted(due, key=repr):
        closed = _close_windows(node, ns, key, mark, ts_col, reader, wb)
        if not growing:  # a growing session's rows went out as it grew
            rows.extend(closed)
    window_col = [spec.WINDOW_FIELD] if node.window is not None else []
    columns = [*node.keys, *window_col, *(a.into for a in node.aggs), ts_col]
    return pd.DataFrame(rows, columns=columns), late


def _window(node: spec.AggregateNode) -> spec.WindowSpec:
    w = node.windowed_by
    assert w is not None, "an aggregate node has a window or an aggregation"
    return w


def _grows(node: spec.AggregateNode) -> bool:
    """A session keyed by its window, emitted eagerly: each extent is a row of its own."""
    return node.window is not None and node.window.kind == "session" and node.emit == "eager"


def _read_from(node: spec.AggregateNode, meta: bytes | None) -> int | None:
    """Where a key's unemitted events start: after the last emitted window's reach."""
    window = _window(node)
    if _forever(window):
        return None  # every window holds all of a key's events
    reach = (window.duration or 0) * US if window.kind != "session" else 1
    return None if meta is None else int(meta) - reach


def _row(
    node: spec.AggregateNode,
    key: tuple[Any, ...],
    span: tuple[int, int],
    inside: list[tuple[int, dict[str, Any]]],
    ts_col: str,
) -> dict[str, Any]:
    """The row of ``key``'s window ``span`` (begin, end in microseconds) over ``inside``."""
    start, end = span
    row: dict[str, Any] = dict(zip(node.keys, key, strict=True))
    if node.window is not None:
        stamp = end  # a window key's row exists from its end, as Fennel stamps it
        row[spec.WINDOW_FIELD] = {"begin": _ts(start), "end": _ts(end)}
    else:  # the value as of the window's last instant, answered ``lookback`` later
        stamp = end - 1 + _lookback(_window(node))
    for agg in node.aggs:
        row[agg.into] = aggregate_values(
            agg, [e.get(agg.of) if agg.of else 1 for _, e in inside], [s for s, _ in inside]
        )
    row[ts_col] = _ts(stamp)
    return row


def _ts(us: int) -> pd.Timestamp:
    return pd.Timestamp(us, unit="us", tz="UTC")


def _grown_sessions(
    node: spec.AggregateNode,
    ns: str,
    key: tuple[Any, ...],
    new: list[int],
    mark: int,
    ts_col: str,
    reader: StateReader,
) -> list[dict[str, Any]]:
    """A row for each instant of the batch's events of ``key`` (``new``): its session as of
    that instant (up to it, over every event recorded). Sessions are cut left to right, so a
    session as of an instant is the whole one cut short there, and the rows do not depend
    on how a stream in event-time order was cut into batches."""
    window = _window(node)
    raw_upto = reader.get(ns + ":meta", b"upto:" + key_prefix(key))
    events = key_events(reader, ns, key, _read_from(node, raw_upto), mark)
    reach = _session_reach(window)
    instants = sorted(set(new))
    rows = []
    for start, close in _windows(window, [s for s, _ in events]):
        for t in instants:
            if start <= t <= close - reach:  # its last event at the latest
                inside = [(s, e) for s, e in events if start <= s <= t]
                rows.append(_row(node, key, (start, t + 1), inside, ts_col))
    return rows


def _close_windows(
    node: spec.AggregateNode,
    ns: str,
    key: tuple[Any, ...],
    mark: int,
    ts_col: str,
    reader: StateReader,
    wb: WriteBatch,
) -> list[dict[str, Any]]:
    """The rows of ``key``'s windows that ``mark`` closes; re-arms a timer for its next one.

    Only events after the last emitted window's reach are read (``upto``: the newest emitted
    end), so a key's long history is not re-read at every window."""
    meta_ns = ns + ":meta"
    window = _window(node)
    upto_key = b"upto:" + key_prefix(key)
    raw_upto = reader.get(meta_ns, upto_key)
    events = key_events(reader, ns, key, _read_from(node, raw_upto), mark)
    rows = []
    upto = None if raw_upto is None else int(raw_upto)
    pending = []
    lookback = _lookback(window)
    for start, end in _windows(window, [s for s, _ in events], _closes_empty(node)):
        if end + lookback > mark:
            pending.append(end + lookback)
            continue
        # a window is told by its start; forever windows all start at once: by their end
        done_key = key_prefix(key) + str(end if _forever(window) else start).encode()
        if reader.get(meta_ns, done_key) is not None:
            continue
        wb.put(meta_ns, done_key, b"1")
        inside = [(s, e) for s, e in events if start <= s < end]
        span = (start, end)
        if node.window is not None and window.kind == "session":  # as a key, a session ends
            span = (start, end - _session_reach(window) + 1)  # a microsecond after its last event
        rows.append(_row(node, key, span, inside, ts_col))
        upto = end if upto is None else max(upto, end)
    if upto is not None:
        wb.put(meta_ns, upto_key, str(upto).encode())
    if pending:
        wb.put(
            timers_namespace(ns), _timer(min(pending)) + key_prefix(key), json.dumps(key).encode()
        )
    return rows


def timers_namespace(ns: str) -> str:
    return ns + ":timers"


def _timer(end_us: int) -> bytes:
    """Timers sort by window end (offset binary: negative times sort first), then key."""
    return (end_us + 2**63).to_bytes(8, "big")


def _first_end(w: spec.WindowSpec, t_us: int) -> int:
    """When the first window holding an event at ``t_us`` can close (a session's: at the
    earliest ``gap`` after it; a later event that extends it leaves a later timer)."""
    if w.kind == "session":
        return t_us + _session_reach(w)
    return min(end for _, end in _spans_of(w, t_us)) + _lookback(w)


def _closed_before(w: spec.WindowSpec, t_us: int, mark: int) -> bool:
    if w.kind == "session":
        return False  # a late event can always open or extend a session of its own
    return all(end + _lookback(w) <= mark for _, end in _spans_of(w, t_us))


def _spans_of(w: spec.WindowSpec, t_us: int) -> list[tuple[int, int]]:
    """(start, end) of the tumbling or hopping windows holding an event at ``t_us`` (a
    forever window: the one ending first; later ones add nothing but later events)."""
    if _forever(w):
        stride = (w.stride or 0) * US
        return [(FOREVER_START, t_us // stride * stride + stride)]
    return [(s, s + (w.duration or 0) * US) for s in _window_starts(w, t_us)]


def _lookback(w: spec.WindowSpec) -> int:
    """How long after its end a window is emitted (Fennel's ``lookback``): its row answers
    lookups from then on, and events for it are taken until then."""
    return w.lookback * US


def _session_reach(w: spec.WindowSpec) -> int:
    """How long after its last event a session takes another: ``gap`` itself included (an
    event exactly ``gap`` later extends it, as in Fennel), so it closes a microsecond later."""
    return (w.gap or 0) * US + 1


def _closes_empty(node: spec.AggregateNode) -> bool:
    """Whether a key's first window without events after windows with some is emitted too
    (its aggregations over nothing: a count of 0), as Fennel answers a tumbling or hopping
    aggregation whose last window held none. Not for windows as keys: each row is a window
    that held events; not for a forever window, whose next one holds them all again."""
    w = _window(node)
    return node.window is None and w.kind != "session" and not _forever(w)


def _windows(
    w: spec.WindowSpec, stamps: list[int], empty_after: bool = False
) -> list[tuple[int, int]]:
    """The windows holding ``stamps``; ``empty_after``: with each one's successor (a stride
    later) that holds none of them."""
    if w.kind == "session":
        out: list[tuple[int, int]] = []
        gap = _session_reach(w)
        for s in sorted(stamps):
            if out and s < out[-1][1]:
                out[-1] = (out[-1][0], s + gap)
            else:
                out.append((s, s + gap))
        return out
    stride = (w.stride or w.duration or 0) * US
    spans = {span for t in stamps for span in _spans_of(w, t)}
    if empty_after:
        spans |= {(s + stride, e + stride) for s, e in spans}
    return sorted(spans)
