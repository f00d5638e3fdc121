"""``groupby(...).aggregate(...)``: windowed aggregations over per-key event history.

State of a continuous (or ``forever``) aggregate, two namespaces:

- ``agg:<scope>:<node>``: one entry per input event under ``entry_key(group key, event time,
  content seq)`` holding the fields the aggregations read (identical events get consecutive
  sequence numbers, so they count as often as they occur whatever the batching);
- ``agg:<scope>:<node>:tiles``: per (group key, tile size, tile index) the exact partial
  aggregates of the key's events in that tile (``ops/tiles.py``): row count, and per column
  read by a count/sum/avg/min/max/stddev its non-null count, exact sum and sum of squares
  (dyadic integers), min and max.

Exactness. The value at time ``t`` aggregates exactly the key's events with event time in
``(t - duration, t]`` (``forever``: all up to ``t``), whatever order and batching they arrived
in; a late event inside the source's ``disorder`` changes every later lookup, while rows
already emitted are not retracted. The window is assembled as raw events of the partial tile
at each end plus whole tiles in between (``tiles.plan``): a continuous window of duration
``d`` has tiles of ~``d/32`` (and finer levels for its ends when ``d`` is long); ``forever``
a hierarchy 2**36 s .. 64 s, so a prefix is <= 31 tiles per level. Counts, integer sums, min
and max are exact; a float sum is the correctly rounded exact sum (so it can differ in the
last bits from a left-to-right float sum, but never depends on order or batching); avg and
stddev are computed from the exact sums (stddev: population). Quantile, distinct, lastk/firstk
and count(unique) are not decomposable: they read the window's raw events (quantile: exact
nearest-rank "lower", even with ``approx=True``; count(unique, approx=True) is exact too).

Cost. Per batch, per key of the batch: a few range scans (raw events of the edge tiles,
whole tiles per level), one raw entry per event and one tile update per touched tile and
level into the ``WriteBatch``; then every event's values at once with numpy over the batch
(prefix sums and ``searchsorted`` per source). Per event: O(1) state writes and O(levels)
array work; per lookup: <= ~64 tiles + the raw events of two fine edge tiles (``forever``:
<= 31 tiles per level + one 64 s tile), independent of the history's length. Emission: one
row per event with the aggregates as of its own time, after the whole batch is recorded.

Tumbling and hopping windows emit one row per (key, window) once the watermark (the newest
event time seen by the operator) passes the window's end; the row's timestamp is the window
end minus one microsecond (inside the window). Session windows close after ``gap`` of
inactivity measured against the watermark. Events later than an emitted window are counted
as late and dropped from it; they read all of a key's events (no tiles).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fennel_dagster.ops import tiles
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


# --------------------------------------------------------------------------- continuous windows

TILED = frozenset({"count", "sum", "avg", "min", "max", "stddev"})
_TILE = struct.Struct(">QQ")
_FLIP = 1 << 63


def tiles_namespace(scope: str, node: spec.AggregateNode) -> str:
    return f"{namespace(scope, node)}:tiles"


def _tiled(agg: spec.AggSpec) -> bool:
    return agg.kind in TILED and not (agg.kind == "count" and agg.unique)


_ENTRY = struct.Struct(">QQ")


def _entry(prefix: bytes, ts_us: int, seq: int) -> bytes:
    """``entry_key`` with the key's prefix computed once."""
    return prefix + _ENTRY.pack(ts_us + _FLIP, seq)


def _tile_key(prefix: bytes, size: int, idx: int) -> bytes:
    return prefix + _TILE.pack(size, idx + _FLIP)


def _wkey(w: spec.WindowSpec) -> tuple[str, int | None]:
    return (w.kind, None if w.kind == "forever" else w.duration)


@dataclass
class _Layout:
    """What a continuous aggregate node keeps in tiles and what it assembles from raw events."""

    tiled: list[spec.AggSpec]
    raw: list[spec.AggSpec]
    windows: dict[tuple[str, int | None], tuple[int, ...]]
    sizes: tuple[int, ...]
    cols: dict[str, bool]  # tiled column -> keeps sums of squares (a stddev reads it)
    extremes: frozenset[str]  # tiled columns a min or max reads

    @classmethod
    def of(cls, node: spec.AggregateNode) -> _Layout:
        tiled = [a for a in node.aggs if _tiled(a)]
        windows = {_wkey(a.window): tiles.levels(a.window.kind, a.window.duration) for a in tiled}
        cols: dict[str, bool] = {}
        for a in tiled:
            if a.of:
                cols[a.of] = cols.get(a.of, False) or a.kind == "stddev"
        sizes = tuple(sorted({s for lv in windows.values() for s in lv}))
        extremes = frozenset(a.of for a in tiled if a.of and a.kind in ("min", "max"))
        return cls(tiled, [a for a in node.aggs if not _tiled(a)], windows, sizes, cols, extremes)


def _lows(w: tuple[str, int | None], hi: np.ndarray) -> np.ndarray:
    if w[0] == "forever":
        return np.full(len(hi), tiles.NEG_INF, dtype=np.int64)
    return hi - (w[1] or 0) * US + 1


class _Source:
    """Events, or one tile level, of every key of a batch: sorted by (key, position), with
    prefix sums and min/max arrays per column, searched per key with ``locate``."""

    def __init__(self, keys: np.ndarray, pos: np.ndarray, n: np.ndarray) -> None:
        self.keys = keys
        self.pos = pos
        self.n = tiles.prefix(n)
        self.cols: dict[str, dict[str, np.ndarray]] = {}

    def locate(self, qkeys: np.ndarray, bounds: list[np.ndarray]) -> list[np.ndarray]:
        """Per bound array: the index of the first entry of the query's key at or after it."""
        m = len(qkeys)
        allpos = np.concatenate([self.pos, *bounds])
        _, rank = np.unique(allpos, return_inverse=True)
        width = np.int64(rank.max() + 2 if len(rank) else 1)
        mine = self.keys * width + rank[: len(self.pos)]
        out = []
        for i in range(len(bounds)):
            q = rank[len(self.pos) + i * m : len(self.pos) + (i + 1) * m]
            out.append(np.searchsorted(mine, qkeys * width + q, "left"))
        return out


def _number_array(values: list[Any], fill: float) -> np.ndarray:
    big = any(isinstance(v, int) and not -(2**53) <= v <= 2**53 for v in values if v is not None)
    return np.array([fill if v is None else v for v in values], dtype=object if big else float)


def _fill_column(
    src: _Source,
    col: str,
    stats: list[list[Any]],
    scale: int,
    squares: bool,
    extremes: bool,
) -> None:
    """``stats``: per element ``[c, fc, sn, se, qn, qe, mn, mx]`` (tile layout)."""
    arrays = {
        "c": tiles.prefix(np.array([s[0] for s in stats], dtype=np.int64)),
        "fc": tiles.prefix(np.array([s[1] for s in stats], dtype=np.int64)),
        "s": tiles.prefix(_objects([s[2] << (s[3] - scale) for s in stats])),
    }
    if extremes:
        arrays["mn"] = _number_array([s[6] for s in stats], np.inf)
        arrays["mx"] = _number_array([s[7] for s in stats], -np.inf)
    if squares:
        arrays["q"] = tiles.prefix(_objects([s[4] << (s[5] - 2 * scale) for s in stats]))
    src.cols[col] = arrays


def _objects(values: list[Any]) -> np.ndarray:
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr


def _event_stats(v: Any, squares: bool) -> list[Any]:
    if v is None:
        return [0, 0, 0, 0, 0, 0, None, None]
    n, e = tiles.exact(v)
    return [1, int(isinstance(v, float)), n, e, n * n if squares else 0, 2 * e, v, v]


def _scale(stats: list[list[Any]]) -> int:
    exps = [s[3] for s in stats if s[2]] + [s[5] // 2 for s in stats if s[4]]
    return min(exps, default=0)


Event = tuple[int, int, dict[str, Any]]  # time, sequence, record


def _load_key(
    lay: _Layout,
    reader: StateReader,
    ns: str,
    key: tuple[Any, ...],
    raw_iv: list[tuple[int, int]],
    tile_iv: dict[int, list[tuple[int, int]]],
    new: list[tuple[int, dict[str, Any]]],
    wb: WriteBatch | None,
) -> tuple[list[Event], dict[int, dict[int, dict[str, Any]]]]:
    """One key's raw events and tiles in the given ranges; ``new`` events recorded first
    (raw entries and tile updates into ``wb``) and included."""
    tns = ns + ":tiles"
    prefix = key_prefix(key)
    events: list[Event] = []
    for a, b in raw_iv:
        for k, v in reader.scan(ns, _entry(prefix, a, 0), _entry(prefix, b, 0)):
            events.append((*split_entry(k), loads(v)))
    levels: dict[int, dict[int, dict[str, Any]]] = {}
    for size in lay.sizes:
        found: dict[int, dict[str, Any]] = {}
        for a, b in tile_iv[size]:
            for k, v in reader.scan(tns, _tile_key(prefix, size, a), _tile_key(prefix, size, b)):
                found[_TILE.unpack(k[-_TILE.size :])[1] - _FLIP] = loads(v)
        levels[size] = found
    if not new:
        return events, levels
    assert wb is not None
    taken = {(t, s) for t, s, _ in events}
    for t, rec in new:
        seq = content_seq({**rec, "_k": list(key)})
        while (t, seq) in taken:
            seq += 1
        taken.add((t, seq))
        wb.put(ns, _entry(prefix, t, seq), dumps(rec))
        events.append((t, seq, rec))
    events.sort(key=lambda e: (e[0], e[1]))
    for size in lay.sizes:
        groups: dict[int, list[dict[str, Any]]] = {}
        for t, rec in new:
            groups.setdefault(t // size, []).append(rec)
        for idx, recs in groups.items():
            part = {
                "n": len(recs),
                "v": {
                    c: tiles.col_stats([r.get(c) for r in recs], sq) for c, sq in lay.cols.items()
                },
            }
            old = levels[size].get(idx)
            merged = part if old is None else tiles.merge_stats(old, part)
            levels[size][idx] = merged
            wb.put(tns, _tile_key(prefix, size, idx), dumps(merged))
    return events, levels


def _compute(
    lay: _Layout,
    reader: StateReader,
    ns: str,
    keys: Sequence[tuple[Any, ...]],
    hi_us: np.ndarray,
    new: list[dict[str, Any]] | None = None,
    wb: WriteBatch | None = None,
) -> dict[str, list[Any]]:
    """Every aggregation at each (key, time) query; with ``new`` (one record per query, the
    batch's events), records them first. Queries are handled grouped by key: per key a few
    range scans; then all values at once with numpy over the batch."""
    n = len(keys)
    ids: dict[tuple[Any, ...], int] = {}
    kid = np.array([ids.setdefault(k, len(ids)) for k in keys], dtype=np.int64)
    order = np.argsort(kid, kind="stable")
    qk, hi = kid[order], hi_us[order].astype(np.int64)
    plans = {w: tiles.plan(lv, _lows(w, hi), hi) for w, lv in lay.windows.items()}
    raw_lows = [_lows(_wkey(a.window), hi) for a in lay.raw]
    raw_bounds: list[tuple[np.ndarray, np.ndarray]] = [(hi, hi + 1)]  # instants of new events
    raw_bounds += [(lo, hi + 1) for lo in raw_lows]
    tile_bounds: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {
        s: [(hi // s, hi // s + 1)] if new is not None else [] for s in lay.sizes
    }
    for p in plans.values():
        raw_bounds += [(p.la, p.lb), (p.ra, p.rb)]
        for size, l0, l1, r0, r1 in p.tiles:
            tile_bounds[size] += [(l0, l1), (r0, r1)]
    raw_lo = np.stack([a for a, _ in raw_bounds])
    raw_hi = np.stack([b for _, b in raw_bounds])
    tile_lo = {s: np.stack([a for a, _ in bs]) for s, bs in tile_bounds.items() if bs}
    tile_hi = {s: np.stack([b for _, b in bs]) for s, bs in tile_bounds.items() if bs}
    starts = np.flatnonzero(np.r_[True, qk[1:] != qk[:-1]]) if n else np.zeros(0, np.int64)
    ends = np.r_[starts[1:], n]
    by_id = list(ids)
    all_events: list[Event] = []
    ev_keys: list[int] = []
    tile_rows: dict[int, tuple[list[int], list[int], list[dict[str, Any]]]] = {
        s: ([], [], []) for s in lay.sizes
    }
    for s0, e0 in zip(starts.tolist(), ends.tolist(), strict=True):
        k = int(qk[s0])
        raw_iv = tiles.merge_intervals(raw_lo[:, s0:e0].ravel(), raw_hi[:, s0:e0].ravel())
        tile_iv = {
            s: tiles.merge_intervals(tile_lo[s][:, s0:e0].ravel(), tile_hi[s][:, s0:e0].ravel())
            if s in tile_lo
            else []
            for s in lay.sizes
        }
        fresh = [] if new is None else [(int(hi[i]), new[int(order[i])]) for i in range(s0, e0)]
        events, levels = _load_key(lay, reader, ns, by_id[k], raw_iv, tile_iv, fresh, wb)
        all_events += events
        ev_keys += [k] * len(events)
        for size, found in levels.items():
            ks, idx, stats = tile_rows[size]
            for i in sorted(found):
                ks.append(k)
                idx.append(i)
                stats.append(found[i])

    raw = _Source(
        np.array(ev_keys, dtype=np.int64),
        np.array([e[0] for e in all_events], dtype=np.int64),
        np.ones(len(all_events), np.int64),
    )
    out: dict[str, list[Any]] = {}
    if lay.tiled:
        out.update(_tiled_values(lay, plans, qk, raw, all_events, tile_rows))
    if lay.raw:
        ends_at = raw.locate(qk, [hi + 1])[0]
        for a, lo in zip(lay.raw, raw_lows, strict=True):
            begins = raw.locate(qk, [lo])[0]
            out[a.into] = [
                aggregate_values(
                    a,
                    [e[2].get(a.of) if a.of else 1 for e in all_events[x:y]],
                    [e[0] for e in all_events[x:y]],
                )
                for x, y in zip(begins.tolist(), ends_at.tolist(), strict=True)
            ]
    back = np.empty(n, dtype=np.int64)
    back[order] = np.arange(n)
    picks = back.tolist()
    return {into: [col[i] for i in picks] for into, col in out.items()}


def _tiled_values(
    lay: _Layout,
    plans: dict[tuple[str, int | None], tiles.Plan],
    qk: np.ndarray,
    raw: _Source,
    events: list[Event],
    tile_rows: dict[int, tuple[list[int], list[int], list[dict[str, Any]]]],
) -> dict[str, list[Any]]:
    srcs: dict[int | None, _Source] = {None: raw}
    tile_stats: dict[int, list[dict[str, Any]]] = {}
    for size, (ks, idx, stats) in tile_rows.items():
        tile_stats[size] = stats
        n = np.array([s["n"] for s in stats], dtype=np.int64)
        srcs[size] = _Source(np.array(ks, dtype=np.int64), np.array(idx, dtype=np.int64), n)
    empty = [0, 0, 0, 0, 0, 0, None, None]
    scales: dict[str, int] = {}
    for col, squares in lay.cols.items():
        per: dict[int | None, list[list[Any]]] = {
            None: [_event_stats(e[2].get(col), squares) for e in events]
        }
        for size, stats in tile_stats.items():
            per[size] = [s["v"].get(col, empty) for s in stats]
        scale = min((_scale(st) for st in per.values()), default=0)
        for where, st in per.items():
            _fill_column(srcs[where], col, st, scale, squares, col in lay.extremes)
        scales[col] = scale

    out: dict[str, list[Any]] = {}
    for w, p in plans.items():
        la, lb, ra, rb = raw.locate(qk, [p.la, p.lb, p.ra, p.rb])
        pieces = [(raw, la, lb), (raw, ra, rb)]
        for size, l0, l1, r0, r1 in p.tiles:
            src = srcs[size]
            i0, i1, j0, j1 = src.locate(qk, [l0, l1, r0, r1])
            pieces += [(src, i0, i1), (src, j0, j1)]

        def total(col: str | None, stat: str, pieces: list[Any] = pieces) -> np.ndarray:
            acc: np.ndarray | None = None
            for src, i0, i1 in pieces:
                arr = src.n if col is None else src.cols[col][stat]
                part = arr[i1] - arr[i0]
                acc = part if acc is None else acc + part
            assert acc is not None
            return acc

        def extreme(col: str, stat: str, pieces: list[Any] = pieces) -> np.ndarray:
            fn, fill = (np.minimum, np.inf) if stat == "mn" else (np.maximum, -np.inf)
            acc: np.ndarray | None = None
            for src, i0, i1 in pieces:
                part = tiles.range_reduce(fn, src.cols[col][stat], i0, i1, fill)
                if acc is None:
                    acc = part
                elif acc.dtype == part.dtype:
                    acc = fn(acc, part)
                else:
                    acc = fn(acc.astype(object), part.astype(object))
            assert acc is not None
            return acc

        for a in (a for a in lay.tiled if _wkey(a.window) == w):
            out[a.into] = _finish(a, total, extreme, scales.get(a.of or "", 0))
    return out


def _finish(agg: spec.AggSpec, total: Any, extreme: Any, scale: int) -> list[Any]:
    """The aggregation's values from its window's totals (see ``tiles`` for exactness)."""
    col = agg.of
    if agg.kind == "count":
        n = total(col, "c") if col and agg.dropnull else total(None, "")
        return [int(x) for x in n]
    assert col is not None
    c = total(col, "c").tolist()
    fc = total(col, "fc").tolist()
    if agg.kind in ("min", "max"):
        vals = extreme(col, "mn" if agg.kind == "min" else "mx").tolist()
        return [
            agg.default if k == 0 else float(v) if f else int(v)
            for k, f, v in zip(c, fc, vals, strict=True)
        ]
    s = total(col, "s").tolist()
    if agg.kind == "sum":
        return [
            0 if k == 0 else tiles.to_float(x, scale) if f else tiles.to_int(x, scale)
            for k, f, x in zip(c, fc, s, strict=True)
        ]
    if agg.kind == "avg":
        return [agg.default if k == 0 else _ratio(x, scale, k) for k, x in zip(c, s, strict=True)]
    q = total(col, "q").tolist()
    out = []
    for k, x, y in zip(c, s, q, strict=True):
        if k == 0:
            out.append(agg.default)
            continue
        num = k * y - x * x  # exact: var = num * 2**(2*scale) / k**2
        out.append(math.sqrt(max(_ratio(num, 2 * scale, k * k), 0.0)))
    return out


def _ratio(n: int, e: int, d: int) -> float:
    """``n * 2**e / d`` correctly rounded."""
    return (n << e) / d if e >= 0 else n / (d << -e)


def _own_view(state: StateReader, wb: WriteBatch, names: Sequence[str]) -> OverlayReader:
    """An overlay of ``wb``'s pending writes to ``names`` only (scans then skip the rest)."""
    mine = WriteBatch({(ns, k): v for (ns, k), v in wb.puts.items() if ns in names})
    return OverlayReader(state, mine)


def values_at(
    reader: StateReader,
    ns: str,
    node: spec.AggregateNode,
    keys: Sequence[tuple[Any, ...]],
    stamps_us: Sequence[int],
) -> dict[str, list[Any]]:
    """Each continuous aggregation of ``node`` for each (key, time) query."""
    return _compute(_Layout.of(node), reader, ns, keys, np.asarray(stamps_us, dtype=np.int64))


def lookup_aggregate(
    reader: StateReader, scope: str, node: spec.AggregateNode, keys: pd.DataFrame, ts: pd.Series
) -> tuple[pd.DataFrame, pd.Series]:
    """A continuous-window dataset's values as of ``ts``, assembled from tiles and events.

    ``found``: the key has an event at or before ``ts`` (one entry read)."""
    ns = namespace(scope, node)
    queries = key_tuples(keys, node.keys)
    stamps = [micros(s) for s in pd.to_datetime(ts, utc=True)]
    found = [
        next(iter(reader.scan(ns, key_prefix(k), entry_key(k, t + 1, 0))), None) is not None
        for k, t in zip(queries, stamps, strict=True)
    ]
    values = values_at(reader, ns, node, queries, stamps)
    return pd.DataFrame(values, columns=[a.into for a in node.aggs]), pd.Series(found, dtype=bool)


def run_continuous(
    node: spec.AggregateNode,
    scope: str,
    df: pd.DataFrame,
    ts_col: str,
    state: StateReader,
    wb: WriteBatch,
) -> pd.DataFrame:
    """Record the batch's events; emit one row per event with the aggregates as of its time.

    Per key of the batch: a few range scans (raw edge tiles, whole tiles per level), the
    events and tile updates into ``wb``, then every event's values at once with numpy."""
    ns = namespace(scope, node)
    lay = _Layout.of(node)
    reader = _own_view(state, wb, [ns, tiles_namespace(scope, node)])
    cols = _of_columns(node)
    keys = key_tuples(df, node.keys)
    stamps = pd.to_datetime(df[ts_col], utc=True)
    us = (stamps.dt.as_unit("ns").astype("int64") // 1000).to_numpy(dtype=np.int64)
    values = {c: [json_value(v) for v in df[c].tolist()] for c in cols}
    recs = [{c: values[c][i] for c in cols} for i in range(len(df))]
    out_vals = _compute(lay, reader, ns, keys, us, recs, wb)
    out = df[list(node.keys)].reset_index(drop=True).copy()
    for a in node.aggs:
        out[a.into] = pd.Series(out_vals[a.into], dtype=object)
    out[ts_col] = stamps.reset_index(drop=True)
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
