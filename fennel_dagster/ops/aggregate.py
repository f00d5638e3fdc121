"""``groupby(...).aggregate(...)``: windowed aggregations over per-key event history.

State of a continuous (or ``forever``) aggregate, two namespaces:

- ``agg:<scope>:<node>``: one entry per input event under ``entry_key(group key, event time,
  content seq)`` holding the fields the aggregations read (identical events get consecutive
  sequence numbers, so they count as often as they occur whatever the batching): a fixed-width
  binary record (time, sequence, per field a tag and 8 bytes) when every field is null, an
  int64 or a float, else the canonical JSON record;
- ``agg:<scope>:<node>:tiles``: per (group key, tile size, tile index) the exact partial
  aggregates of the key's events in that tile (``ops/tiles.py``): row count, and per column
  read by a count/sum/avg/min/max/stddev its non-null count, exact sum and sum of squares
  (dyadic integers), min and max; a fixed-width binary record when the sums fit 128 bits,
  else JSON (the formats: "value formats" below).

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
whole tiles per level); then, for the whole batch at once with numpy: the binary values
decoded (one ``frombuffer`` per namespace and level), one raw entry per event and one tile
update per touched tile and level into the ``WriteBatch`` (grouped sums, ``reduceat``), and
every event's values (prefix sums and ``searchsorted`` per source). Per event: O(1) state writes and O(levels)
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
_ENTRY = struct.Struct(">QQ")
_I64_LO, _I64_HI = -(1 << 63), 1 << 63
_I128 = 1 << 127
_EXACT_FLOAT = 1 << 53  # ints up to this are exact as float64


def tiles_namespace(scope: str, node: spec.AggregateNode) -> str:
    return f"{namespace(scope, node)}:tiles"


def _tiled(agg: spec.AggSpec) -> bool:
    return agg.kind in TILED and not (agg.kind == "count" and agg.unique)


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
    fields: list[str]  # every column an aggregation reads (the raw event's fields), sorted

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
        raw = [a for a in node.aggs if not _tiled(a)]
        return cls(tiled, raw, windows, sizes, cols, extremes, _of_columns(node))


def _lows(w: tuple[str, int | None], hi: np.ndarray) -> np.ndarray:
    if w[0] == "forever":
        return np.full(len(hi), tiles.NEG_INF, dtype=np.int64)
    return hi - (w[1] or 0) * US + 1


# --------------------------------------------------------------------------- value formats
#
# Raw event value: ``<B q Q`` (format 1, time, sequence), then per field (sorted) a tag byte
# (0 null, 1 int64, 2 float64) and 8 bytes, little-endian; an event with any other value (a
# string, a bool, an int beyond int64, a list...) is stored as its canonical JSON record
# instead (which starts with ``{``). Tile value: ``<B q q`` (format 1, tile index, rows), then
# per tiled column (sorted) ``<q q i i Q q Q q B 8s B 8s``: non-null count, float count,
# exponents of the sum and of the sum of squares, their mantissas as 128-bit two's complement
# (low, high), min and max (tag and 8 bytes as above); a tile whose numbers do not fit is
# stored as JSON ``{"n": rows, "v": {column: [c, fc, sn, se, qn, qe, mn, mx]}}``. Both fixed
# widths are decoded for a whole batch at once (``np.frombuffer``). Canonical: the same
# events give the same bytes whatever the batching (sums canonical, min/max float iff fc).


def _raw_dtype(ncols: int) -> np.dtype:
    f: list[tuple[str, str]] = [("v", "u1"), ("ts", "<i8"), ("seq", "<u8")]
    for i in range(ncols):
        f += [(f"t{i}", "u1"), (f"x{i}", "<i8")]
    return np.dtype(f)


def _tile_dtype(ncols: int) -> np.dtype:
    f: list[tuple[str, str]] = [("v", "u1"), ("idx", "<i8"), ("n", "<i8")]
    for i in range(ncols):
        f += [(f"c{i}", "<i8"), (f"fc{i}", "<i8"), (f"se{i}", "<i4"), (f"qe{i}", "<i4"),
              (f"sl{i}", "<u8"), (f"sh{i}", "<i8"), (f"ql{i}", "<u8"), (f"qh{i}", "<i8"),
              (f"nt{i}", "u1"), (f"mn{i}", "<i8"), (f"xt{i}", "u1"), (f"mx{i}", "<i8")]  # fmt: skip
    return np.dtype(f)


def _tag(v: Any) -> int:
    """Binary tag of a JSON-safe value: 0 null, 1 int64, 2 float, 3 anything else."""
    if v is None:
        return 0
    t = type(v)
    if t is float:
        return 2
    if t is int and _I64_LO <= v < _I64_HI:
        return 1
    return 3


_F64 = struct.Struct("<d")
_Q = struct.Struct("<q")


def _bits(v: Any, tag: int) -> int:
    if tag == 1:
        return int(v)
    if tag == 2:
        return int(_Q.unpack(_F64.pack(v))[0])
    return 0


def _encode_tile(idx: int, n: int, stats: list[list[Any]], names: list[str]) -> bytes:
    parts: list[Any] = [1, idx, n]
    fmt = ["<Bqq"]
    for c, fc, sn, se, qn, qe, mn, mx in stats:
        tn, tx = _tag(mn), _tag(mx)
        if (
            not -_I128 <= sn < _I128 or not -_I128 <= qn < _I128 or tn == 3 or tx == 3
            or not -(1 << 31) <= se < 1 << 31 or not -(1 << 31) <= qe < 1 << 31
        ):  # fmt: skip
            return dumps({"n": n, "v": dict(zip(names, stats, strict=True))})
        fmt.append("qqiiQqQqBqBq")
        m64 = (1 << 64) - 1
        parts += [c, fc, se, qe, sn & m64, sn >> 64, qn & m64, qn >> 64,
                  tn, _bits(mn, tn), tx, _bits(mx, tx)]  # fmt: skip
    return struct.pack("".join(fmt), *parts)


# --------------------------------------------------------------------------- columnar stats


@dataclass
class _Table:
    """Elements (events or tiles) of a batch's keys: key id, position (time or tile index),
    rows, and per column the partial aggregates as arrays (``sn``/``qn``: int64 or Python
    ints; ``mn``/``mx``: float64 when exact, else objects; empty: +inf/-inf)."""

    kid: np.ndarray
    pos: np.ndarray
    n: np.ndarray
    cols: dict[str, dict[str, np.ndarray]]

    def take(self, sel: np.ndarray) -> _Table:
        cols = {c: {k: a[sel] for k, a in d.items()} for c, d in self.cols.items()}
        return _Table(self.kid[sel], self.pos[sel], self.n[sel], cols)

    @staticmethod
    def concat(parts: list[_Table]) -> _Table:
        cols = {
            c: {k: np.concatenate([p.cols[c][k] for p in parts]) for k in parts[0].cols[c]}
            for c in parts[0].cols
        }
        cat = np.concatenate
        return _Table(
            cat([p.kid for p in parts]), cat([p.pos for p in parts]), cat([p.n for p in parts]),
            cols,
        )  # fmt: skip


def _objects(values: list[Any]) -> np.ndarray:
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr


def _extremes(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    big = any(type(v) is int and not -_EXACT_FLOAT <= v <= _EXACT_FLOAT for v in values)
    if big:
        return (
            _objects([np.inf if v is None else v for v in values]),
            _objects([-np.inf if v is None else v for v in values]),
        )
    arr = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    none = np.isnan(arr)
    return np.where(none, np.inf, arr), np.where(none, -np.inf, arr)


def _stats_from_lists(stats: list[list[Any]]) -> dict[str, np.ndarray]:
    """Per element ``[c, fc, sn, se, qn, qe, mn, mx]`` -> column arrays (the slow path)."""
    mn, _ = _extremes([s[6] for s in stats])
    _, mx = _extremes([s[7] for s in stats])
    return {
        "c": np.array([s[0] for s in stats], dtype=np.int64),
        "fc": np.array([s[1] for s in stats], dtype=np.int64),
        "sn": _objects([s[2] for s in stats]),
        "se": np.array([s[3] for s in stats], dtype=np.int64),
        "qn": _objects([s[4] for s in stats]),
        "qe": np.array([s[5] for s in stats], dtype=np.int64),
        "mn": mn,
        "mx": mx,
    }


def _event_stats(v: Any, squares: bool) -> list[Any]:
    if v is None:
        return [0, 0, 0, 0, 0, 0, None, None]
    n, e = tiles.exact(v)
    return [1, int(isinstance(v, float)), n, e, n * n if squares else 0, 2 * e, v, v]


def _event_cols(tag: np.ndarray, bits: np.ndarray, squares: bool) -> dict[str, np.ndarray] | None:
    """Partial aggregates of single events from their binary values (None: needs the slow
    path, a value that is not an int64 or a float)."""
    if (tag == 3).any():
        return None
    isint, isf = tag == 1, tag == 2
    f = np.where(isf, bits.view(np.float64), 0.0)
    if np.isinf(f).any():
        raise ValueError("sum/avg/stddev of an infinite value")
    m, e = np.frexp(f)
    sn = np.where(isint, bits, (m * float(_EXACT_FLOAT)).astype(np.int64))
    se = np.where(isint, 0, e.astype(np.int64) - 53)
    out = {"c": (tag != 0).astype(np.int64), "fc": isf.astype(np.int64), "sn": sn, "se": se}
    if squares:
        obj = sn.astype(object)
        out["qn"], out["qe"] = obj * obj, 2 * se
    else:
        out["qn"], out["qe"] = np.zeros(len(tag), np.int64), 2 * se
    if (isint & ((bits > _EXACT_FLOAT) | (bits < -_EXACT_FLOAT))).any():
        vals = [
            None if t == 0 else int(b) for t, b in zip(tag.tolist(), bits.tolist(), strict=True)
        ]
        vals = [
            v if t != 2 else float(x)
            for v, t, x in zip(vals, tag.tolist(), f.tolist(), strict=True)
        ]
        out["mn"], out["mx"] = _extremes(vals)
    else:
        val = np.where(isf, f, bits.astype(np.float64))
        out["mn"] = np.where(tag == 0, np.inf, val)
        out["mx"] = np.where(tag == 0, -np.inf, val)
    return out


class _Events:
    """Raw events of a batch's keys (sorted by key, time, sequence), decoded at once."""

    def __init__(
        self,
        lay: _Layout,
        kid: np.ndarray,
        ts: np.ndarray,
        seq: np.ndarray,
        tag: dict[str, np.ndarray],
        bits: dict[str, np.ndarray],
        json: dict[int, dict[str, Any]],
    ) -> None:
        self.lay, self.kid, self.ts, self.seq = lay, kid, ts, seq
        self.tag, self.bits, self.json = tag, bits, json

    @classmethod
    def decode(cls, lay: _Layout, kid: np.ndarray, items: list[tuple[bytes, bytes]]) -> _Events:
        fields = lay.fields
        dt = _raw_dtype(len(fields))
        vals = [v for _, v in items]
        json: dict[int, dict[str, Any]] = {}
        if all(len(v) == dt.itemsize and v[0] == 1 for v in vals):
            arr = np.frombuffer(b"".join(vals), dtype=dt)
        else:
            arr = np.zeros(len(vals), dtype=dt)
            for i, (k, v) in enumerate(items):
                if v[:1] == b"{":
                    arr["ts"][i], arr["seq"][i] = split_entry(k)
                    for j in range(len(fields)):
                        arr[f"t{j}"][i] = 3
                    json[i] = loads(v)
                else:
                    arr[i] = np.frombuffer(v, dtype=dt)[0]
        return cls._of(lay, kid, arr, json)

    @classmethod
    def _of(
        cls, lay: _Layout, kid: np.ndarray, arr: np.ndarray, json: dict[int, dict[str, Any]]
    ) -> _Events:
        fields = lay.fields
        return cls(
            lay, kid, arr["ts"].astype(np.int64), arr["seq"].astype(np.uint64),
            {c: arr[f"t{j}"].astype(np.int8) for j, c in enumerate(fields)},
            {c: arr[f"x{j}"].astype(np.int64) for j, c in enumerate(fields)},
            json,
        )  # fmt: skip

    def merged(self, other: _Events) -> _Events:
        """Both sets of events, sorted by (key, time, sequence)."""
        cat = np.concatenate
        kid, ts, seq = (
            cat([self.kid, other.kid]),
            cat([self.ts, other.ts]),
            cat([self.seq, other.seq]),
        )
        order = np.lexsort((seq, ts, kid))
        json: dict[int, dict[str, Any]] = {}
        if self.json or other.json:
            back = np.empty(len(order), dtype=np.int64)
            back[order] = np.arange(len(order))
            base = len(self.kid)
            json = {int(back[i]): r for i, r in self.json.items()}
            json.update({int(back[base + i]): r for i, r in other.json.items()})
        return _Events(
            self.lay, kid[order], ts[order], seq[order],
            {c: cat([self.tag[c], other.tag[c]])[order] for c in self.lay.fields},
            {c: cat([self.bits[c], other.bits[c]])[order] for c in self.lay.fields},
            json,
        )  # fmt: skip

    def values(self, col: str) -> list[Any]:
        """The column's values as Python (JSON-safe) values."""
        bits = self.bits[col]
        out = [
            None if t == 0 else i if t == 1 else f
            for t, i, f in zip(
                self.tag[col].tolist(), bits.tolist(), bits.view(np.float64).tolist(), strict=True
            )
        ]
        for i, rec in self.json.items():
            out[i] = rec.get(col)
        return out

    def table(self) -> _Table:
        cols: dict[str, dict[str, np.ndarray]] = {}
        for col, squares in self.lay.cols.items():
            st = None if self.json else _event_cols(self.tag[col], self.bits[col], squares)
            if st is None:
                st = _stats_from_lists([_event_stats(v, squares) for v in self.values(col)])
            cols[col] = st
        return _Table(self.kid, self.ts, np.ones(len(self.kid), np.int64), cols)


def _decode_tiles(
    lay: _Layout, kid: np.ndarray, items: list[tuple[bytes, bytes]] | list[bytes]
) -> _Table:
    names = sorted(lay.cols)
    dt = _tile_dtype(len(names))
    vals = [it if isinstance(it, bytes) else it[1] for it in items]
    m = len(vals)
    if not (m and all(len(v) == dt.itemsize and v[0] == 1 for v in vals)):
        return _decode_tiles_slow(lay, kid, items, names, dt)
    arr = np.frombuffer(b"".join(vals), dtype=dt)
    cols: dict[str, dict[str, np.ndarray]] = {}
    for j, c in enumerate(names):
        st = {"c": arr[f"c{j}"].astype(np.int64), "fc": arr[f"fc{j}"].astype(np.int64)}
        for s, e, lo, hi in (("sn", "se", "sl", "sh"), ("qn", "qe", "ql", "qh")):
            low, high = arr[f"{lo}{j}"], arr[f"{hi}{j}"].astype(np.int64)
            signed = low.astype(np.int64)
            if (high == (signed >> 63)).all():
                st[s] = signed
            else:
                st[s] = high.astype(object) * (1 << 64) + low.astype(object)
            st[e] = arr[f"{e}{j}"].astype(np.int64)
        for key, t, x, fill in (("mn", "nt", "mn", np.inf), ("mx", "xt", "mx", -np.inf)):
            tag = arr[f"{t}{j}"]
            bits = arr[f"{x}{j}"].astype(np.int64)
            isint = tag == 1
            if (isint & ((bits > _EXACT_FLOAT) | (bits < -_EXACT_FLOAT))).any():
                vals2 = [None if a == 0 else int(b) if a == 1 else _F64.unpack(_Q.pack(b))[0]
                         for a, b in zip(tag.tolist(), bits.tolist(), strict=True)]  # fmt: skip
                st[key] = _extremes(vals2)[0 if key == "mn" else 1]
            else:
                val = np.where(isint, bits.astype(np.float64), bits.view(np.float64))
                st[key] = np.where(tag == 0, fill, val)
        cols[c] = st
    return _Table(kid, arr["idx"].astype(np.int64), arr["n"].astype(np.int64), cols)


def _decode_tiles_slow(
    lay: _Layout, kid: np.ndarray, items: Any, names: list[str], dt: np.dtype
) -> _Table:
    idx: list[int] = []
    rows: list[int] = []
    per: dict[str, list[list[Any]]] = {c: [] for c in names}
    empty = [0, 0, 0, 0, 0, 0, None, None]
    for k, v in items:
        i0 = _TILE.unpack(k[-_TILE.size :])[1] - _FLIP
        if v[:1] == b"{":
            d = loads(v)
            idx.append(i0)
            rows.append(d["n"])
            for c in names:
                per[c].append(d["v"].get(c, empty))
            continue
        a = np.frombuffer(v, dtype=dt)[0]
        idx.append(int(a["idx"]))
        rows.append(int(a["n"]))
        for j, c in enumerate(names):

            def num(lo: str, hi: str, j: int = j, a: Any = a) -> int:
                return (int(a[f"{hi}{j}"]) << 64) + int(a[f"{lo}{j}"])

            def ext(t: str, x: str, j: int = j, a: Any = a) -> Any:
                tag, b = int(a[f"{t}{j}"]), int(a[f"{x}{j}"])
                return None if tag == 0 else b if tag == 1 else _F64.unpack(_Q.pack(b))[0]

            per[c].append([int(a[f"c{j}"]), int(a[f"fc{j}"]), num("sl", "sh"), int(a[f"se{j}"]),
                           num("ql", "qh"), int(a[f"qe{j}"]), ext("nt", "mn"), ext("xt", "mx")])  # fmt: skip
    cols = {c: _stats_from_lists(per[c]) for c in names}
    return _Table(kid, np.array(idx, np.int64), np.array(rows, np.int64), cols)


def _align(sn: np.ndarray, se: np.ndarray, scale: int, total: int) -> np.ndarray:
    """``sn << (se - scale)``: int64 if no sum of ``total`` of them can overflow, else ints."""
    nz = sn != 0
    shift = np.where(nz, se - scale, 0).astype(np.int64)
    if sn.dtype != object:
        if not len(sn):
            return sn.astype(np.int64)
        _, ex = np.frexp(np.abs(sn.astype(np.float64)))
        if int((ex + shift).max()) + max(total, 1).bit_length() <= 61:
            return np.left_shift(sn, shift)
    return np.left_shift(sn.astype(object), shift.astype(object))


def _scale(tables: list[_Table], col: str) -> int:
    exps: list[int] = []
    for t in tables:
        st = t.cols[col]
        nz = st["sn"] != 0
        if nz.any():
            exps.append(int(st["se"][nz].min()))
        qz = st["qn"] != 0
        if qz.any():
            exps.append(int((st["qe"][qz] // 2).min()))
    return min(exps, default=0)


def _merge_tiles(
    lay: _Layout, t: _Table, gid: np.ndarray, ngroups: int
) -> list[tuple[int, list[list[Any]]]]:
    """Per group of elements (``gid`` sorted): rows and the canonical stats per column."""
    starts = np.flatnonzero(np.r_[True, gid[1:] != gid[:-1]])
    assert len(starts) == ngroups
    rows = np.add.reduceat(t.n, starts).tolist()
    names = sorted(lay.cols)
    per: list[list[list[Any]]] = []
    total = len(t.n)
    for col in names:
        st = t.cols[col]
        scale = _scale([t], col)
        c = np.add.reduceat(st["c"], starts).tolist()
        fc = np.add.reduceat(st["fc"], starts).tolist()
        s = np.add.reduceat(_align(st["sn"], st["se"], scale, total), starts).tolist()
        q = np.add.reduceat(_align(st["qn"], st["qe"], 2 * scale, total), starts).tolist()
        mn = np.minimum.reduceat(st["mn"], starts).tolist()
        mx = np.maximum.reduceat(st["mx"], starts).tolist()
        out = []
        for g in range(ngroups):
            if c[g] == 0:
                out.append([0, 0, 0, 0, 0, 0, None, None])
                continue
            kind = float if fc[g] else int
            lo, hi = kind(mn[g]), kind(mx[g])
            if kind is float:
                lo, hi = lo + 0.0, hi + 0.0  # -0.0 and 0.0 tie: store one of them
            out.append([c[g], fc[g], *tiles.canonical(int(s[g]), scale),
                        *tiles.canonical(int(q[g]), 2 * scale), lo, hi])  # fmt: skip
        per.append(out)
    return [(rows[g], [p[g] for p in per]) for g in range(ngroups)]


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


def _sorted_table(t: _Table) -> _Table:
    order = np.lexsort((t.pos, t.kid))
    return t.take(order)


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
    batch's events), records them first. Per key a few range scans; then everything (binary
    decoding, tile updates, window values) at once with numpy over the batch."""
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
    prefixes = [key_prefix(k) for k in by_id]
    tns = ns + ":tiles"
    raw_items: list[tuple[bytes, bytes]] = []
    raw_counts: list[int] = []
    tile_items: dict[int, list[tuple[bytes, bytes]]] = {s: [] for s in lay.sizes}
    tile_counts: dict[int, list[int]] = {s: [] for s in lay.sizes}
    group_keys = qk[starts].tolist()
    scan = reader.scan
    for k, s0, e0 in zip(group_keys, starts.tolist(), ends.tolist(), strict=True):
        prefix = prefixes[k]
        before = len(raw_items)
        for a, b in tiles.merge_intervals(raw_lo[:, s0:e0].ravel(), raw_hi[:, s0:e0].ravel()):
            raw_items += scan(ns, _entry(prefix, a, 0), _entry(prefix, b, 0))
        raw_counts.append(len(raw_items) - before)
        for size in tile_lo:
            got = tile_items[size]
            before = len(got)
            for a, b in tiles.merge_intervals(
                tile_lo[size][:, s0:e0].ravel(), tile_hi[size][:, s0:e0].ravel()
            ):
                got += scan(tns, _tile_key(prefix, size, a), _tile_key(prefix, size, b))
            tile_counts[size].append(len(got) - before)
    gk = np.array(group_keys, dtype=np.int64)
    events = _Events.decode(lay, np.repeat(gk, raw_counts), raw_items)
    levels = {s: _decode_tiles(lay, np.repeat(gk, tile_counts[s]), tile_items[s]) for s in tile_lo}
    if new is not None:
        assert wb is not None
        recs = [new[i] for i in order.tolist()]
        events = _record(lay, ns, tns, prefixes, events, levels, qk, hi, recs, by_id, wb)
    tables = {
        None: _sorted_table(events.table()),
        **{s: _sorted_table(t) for s, t in levels.items()},
    }

    out: dict[str, list[Any]] = {}
    if lay.tiled:
        out.update(_tiled_values(lay, plans, qk, tables))
    if lay.raw:
        raw = _Source(events.kid, events.ts, np.ones(len(events.kid), np.int64))
        ends_at = raw.locate(qk, [hi + 1])[0]
        values = {a.of: events.values(a.of) for a in lay.raw if a.of}
        stamps = events.ts.tolist()
        for a, lo in zip(lay.raw, raw_lows, strict=True):
            begins = raw.locate(qk, [lo])[0]
            col = values[a.of] if a.of else None
            out[a.into] = [
                aggregate_values(a, col[x:y] if col is not None else [1] * (y - x), stamps[x:y])
                for x, y in zip(begins.tolist(), ends_at.tolist(), strict=True)
            ]
    back = np.empty(n, dtype=np.int64)
    back[order] = np.arange(n)
    picks = back.tolist()
    return {into: [col[i] for i in picks] for into, col in out.items()}


def _record(
    lay: _Layout,
    ns: str,
    tns: str,
    prefixes: list[bytes],
    events: _Events,
    levels: dict[int, _Table],
    qk: np.ndarray,
    hi: np.ndarray,
    recs: list[dict[str, Any]],
    by_id: list[tuple[Any, ...]],
    wb: WriteBatch,
) -> _Events:
    """Store the batch's events (raw entries) and fold them into their tiles (``wb``); return
    all events (read and new), and replace the tiles they touch in ``levels``."""
    fields = lay.fields
    dt = _raw_dtype(len(fields))
    taken = set(zip(events.kid.tolist(), events.ts.tolist(), events.seq.tolist(), strict=True))
    kids, times = qk.tolist(), hi.tolist()
    m = len(recs)
    arr = np.zeros(m, dtype=dt)
    arr["v"] = 1
    arr["ts"] = hi
    json: dict[int, dict[str, Any]] = {}
    for j, c in enumerate(fields):
        col = [r.get(c) for r in recs]
        tags = [_tag(v) for v in col]
        arr[f"t{j}"] = tags
        arr[f"x{j}"] = [_bits(v, t) for v, t in zip(col, tags, strict=True)]
        for i, t in enumerate(tags):
            if t == 3:
                json[i] = recs[i]
    seqs: list[int] = []
    for k, t, rec in zip(kids, times, recs, strict=True):
        seq = content_seq({**rec, "_k": list(by_id[k])})
        while (k, t, seq) in taken:
            seq += 1
        taken.add((k, t, seq))
        seqs.append(seq)
    arr["seq"] = seqs
    buf = arr.tobytes()
    w = dt.itemsize
    put = wb.puts
    for i, (k, t, seq) in enumerate(zip(kids, times, seqs, strict=True)):
        value = dumps(recs[i]) if i in json else buf[i * w : (i + 1) * w]
        put[(ns, _entry(prefixes[k], t, seq))] = value
    for j in range(len(fields)):
        for i in json:
            arr[f"t{j}"][i] = 3
    fresh_events = _Events._of(lay, qk, arr, json)
    if lay.sizes:
        fresh = fresh_events.table()
        names = sorted(lay.cols)
        for size, old in levels.items():
            idx = fresh.pos // size
            _, rank = np.unique(np.concatenate([old.pos, idx]), return_inverse=True)
            width = np.int64(rank.max() + 1)
            old_code = old.kid * width + rank[: len(old.pos)]
            groups, gid_new = np.unique(
                fresh.kid * width + rank[len(old.pos) :], return_inverse=True
            )
            hit = np.isin(old_code, groups)
            old_rows = np.flatnonzero(hit)
            gid = np.concatenate([np.searchsorted(groups, old_code[old_rows]), gid_new])
            both = _Table.concat([old.take(old_rows), _Table(fresh.kid, idx, fresh.n, fresh.cols)])
            srt = np.argsort(gid, kind="stable")
            both, gid = both.take(srt), gid[srt]
            merged = _merge_tiles(lay, both, gid, len(groups))
            first = np.searchsorted(gid, np.arange(len(groups)))
            g_kid, g_idx = both.kid[first].tolist(), both.pos[first].tolist()
            items: list[tuple[bytes, bytes]] = []
            for k, i, (rows, stats) in zip(g_kid, g_idx, merged, strict=True):
                key = _tile_key(prefixes[k], size, i)
                value = _encode_tile(i, rows, stats, names)
                put[(tns, key)] = value
                items.append((key, value))
            keep = old.take(np.flatnonzero(~hit))
            levels[size] = _Table.concat([keep, _decode_tiles(lay, both.kid[first], items)])
    return events.merged(fresh_events)


def _tiled_values(
    lay: _Layout,
    plans: dict[tuple[str, int | None], tiles.Plan],
    qk: np.ndarray,
    tables: dict[int | None, _Table],
) -> dict[str, list[Any]]:
    srcs: dict[int | None, _Source] = {w: _Source(t.kid, t.pos, t.n) for w, t in tables.items()}
    total = sum(len(t.kid) for t in tables.values())
    scales: dict[str, int] = {}
    for col, squares in lay.cols.items():
        scale = _scale(list(tables.values()), col)
        for where, t in tables.items():
            st = t.cols[col]
            arrays = {
                "c": tiles.prefix(st["c"]),
                "fc": tiles.prefix(st["fc"]),
                "s": tiles.prefix(_align(st["sn"], st["se"], scale, total)),
            }
            if col in lay.extremes:
                arrays["mn"], arrays["mx"] = st["mn"], st["mx"]
            if squares:
                arrays["q"] = tiles.prefix(_align(st["qn"], st["qe"], 2 * scale, total))
            srcs[where].cols[col] = arrays
        scales[col] = scale
    raw = srcs[None]

    out: dict[str, list[Any]] = {}
    for w, p in plans.items():
        la, lb, ra, rb = raw.locate(qk, [p.la, p.lb, p.ra, p.rb])
        pieces = [(raw, la, lb), (raw, ra, rb)]
        for size, l0, l1, r0, r1 in p.tiles:
            src = srcs[size]
            i0, i1, j0, j1 = src.locate(qk, [l0, l1, r0, r1])
            pieces += [(src, i0, i1), (src, j0, j1)]

        def total_of(col: str | None, stat: str, pieces: list[Any] = pieces) -> np.ndarray:
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
            out[a.into] = _finish(a, total_of, extreme, scales.get(a.of or "", 0))
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
    mine = (ns, tiles_namespace(scope, node))
    # A batch reads each key's entries before writing them, and keys' entries are disjoint,
    # so only writes made before this call (none, usually) need an overlay.
    pending = any(name in mine for name, _ in wb.puts)
    reader = _own_view(state, wb, mine) if pending else state
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
