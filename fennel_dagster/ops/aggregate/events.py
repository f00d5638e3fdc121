"""Per-key event history: the namespaces, recording events (canonical JSON entries, read back
per key by the windowed path) and the continuous path's raw events of a batch's keys decoded
at once (``Events``)."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Container, Sequence
from typing import Any

import numpy as np
import pandas as pd

from fennel_dagster.ops.aggregate.codec import bits_of, event_cols, packed, raw_dtype, tag_of
from fennel_dagster.ops.aggregate.layout import Layout, of_columns
from fennel_dagster.ops.aggregate.stats import Table, event_stats, stats_from_lists
from fennel_dagster.ops.keys import entry_key, hashable, key_prefix, micros, prefixed, split_entry
from fennel_dagster.ops.rows import content_seq, dumps, json_value, loads
from fennel_dagster.ops.state import REWRITTEN_SUFFIX, OverlayReader, StateReader, WriteBatch
from fennel_dagster.wire import spec


def namespace(scope: str, node: spec.AggregateNode) -> str:
    return f"agg:{scope}:{node.id}"


def tiles_namespace(scope: str, node: spec.AggregateNode) -> str:
    return namespace(scope, node) + REWRITTEN_SUFFIX


def event_seq(rec: dict[str, Any], key: Sequence[Any]) -> int:
    """An event's tie-breaker among its key's events at one instant: a CRC of its content,
    its key included: the key's prefix, then each field's binary tag and value in name order
    (the bytes ``content_dtype`` packs for a whole batch at once); with a value that is not
    an int64 or a float, of its JSON row (``rows.content_seq``)."""
    names = sorted(rec)
    tags = [tag_of(rec[c]) for c in names]
    if 3 in tags:
        return content_seq({**rec, "_k": list(key)})
    body = b"".join(_TAGGED.pack(t, bits_of(rec[c], t)) for c, t in zip(names, tags, strict=True))
    return zlib.crc32(key_prefix(tuple(key)) + body)


def event_seqs(prefixes: Sequence[bytes], content: np.ndarray) -> list[int]:
    """``event_seq`` of a batch's events: the key prefix of each and its fields packed by
    ``content_dtype`` (rows holding other values are left to ``event_seq``)."""
    crc = zlib.crc32
    return [crc(r) for r in prefixed(prefixes, content)]


_TAGGED = struct.Struct("<Bq")


def first_free(seq: int, taken: Container[int]) -> int:
    """``seq``, or the next one up that no event holds: identical events at one instant
    count as many times as they occur, whatever the batching."""
    while seq in taken:
        seq += 1
    return seq


def free_seqs(
    kid: np.ndarray, ts: np.ndarray, base: Sequence[int], held: tuple[np.ndarray, ...]
) -> list[int]:
    """``first_free`` of each new event in order (key id, time, its ``event_seq``), given the
    (key id, time, sequence) ``held`` already. Only the instants where two of all these
    coincide (identical events, mostly) are taken event by event; everywhere else an event
    keeps its ``base``."""
    n_held = len(held[0])
    k = np.concatenate([held[0], kid]).astype(np.int64)
    t = np.concatenate([held[1], ts]).astype(np.int64)
    s = np.concatenate([held[2].astype(np.uint64), np.asarray(base, dtype=np.uint64)])
    order = np.lexsort((s, t, k))
    k, t, s = k[order], t[order], s[order]
    same_instant = (k[1:] == k[:-1]) & (t[1:] == t[:-1])
    clash = same_instant & (s[1:] == s[:-1])
    out = list(base)
    if not clash.any():
        return out
    instant = np.empty(len(order), dtype=np.int64)
    instant[order] = np.r_[0, np.cumsum(~same_instant)]  # each row's (key, time) group
    busy = np.isin(instant, instant[order[1:][clash]])  # the groups with a clash
    taken: dict[int, set[int]] = {}
    held_seqs = held[2].tolist()
    for i in np.flatnonzero(busy[:n_held]).tolist():
        taken.setdefault(int(instant[i]), set()).add(held_seqs[i])
    for j in np.flatnonzero(busy[n_held:]).tolist():  # the batch's own order
        mine = taken.setdefault(int(instant[n_held + j]), set())
        out[j] = first_free(out[j], mine)
        mine.add(out[j])
    return out


class _Stored:
    """The sequences stored for one key at one instant, as a container."""

    def __init__(self, reader: StateReader, ns: str, key: tuple[Any, ...], us: int) -> None:
        self.reader, self.ns, self.key, self.us = reader, ns, key, us

    def __contains__(self, seq: object) -> bool:
        assert isinstance(seq, int)
        return self.reader.get(self.ns, entry_key(self.key, self.us, seq)) is not None


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
    cols = of_columns(node)
    keys = key_tuples(df, node.keys)
    stamps = pd.to_datetime(df[ts_col], utc=True).tolist()
    values = {c: df[c].tolist() for c in cols}
    for i, (kv, stamp) in enumerate(zip(keys, stamps, strict=True)):
        rec = {c: json_value(values[c][i]) for c in cols}
        us = micros(stamp)
        seq = first_free(event_seq(rec, kv), _Stored(reader, ns, kv, us))
        wb.put(ns, entry_key(kv, us, seq), dumps(rec))


def _plain_ints(col: pd.Series) -> bool:
    """int64 values, none missing: ``tolist`` gives the Python ints ``json_value`` would."""
    return col.dtype == np.int64 or (col.dtype == pd.Int64Dtype() and not col.hasnans)


def key_tuples(df: pd.DataFrame, keys: Sequence[str]) -> list[tuple[Any, ...]]:
    """Each row's group key as a tuple of JSON-safe values (the state key's prefix)."""
    cols = [df[k] for k in keys]
    if cols and all(_plain_ints(c) for c in cols):  # JSON as they are
        return list(zip(*(c.tolist() for c in cols), strict=True))
    rows = df[list(keys)].astype(object).to_numpy().tolist()
    return [tuple(hashable(json_value(v)) for v in row) for row in rows]


def key_events(
    reader: StateReader, ns: str, key: tuple[Any, ...], lo_us: int | None, hi_us: int
) -> list[tuple[int, dict[str, Any]]]:
    prefix = key_prefix(key)
    start = prefix if lo_us is None else entry_key(key, lo_us + 1, 0)
    end = entry_key(key, hi_us, 2**64 - 1)
    out = []
    for k, v in reader.scan(ns, start, end):
        out.append((split_entry(k)[0], loads(v)))
    return out


class NewEvents:
    """A batch's events to record: per field (name order) the binary tags and value bits
    ``codec.tag_of``/``bits_of`` give, and the JSON-safe record of any row holding a value
    that is neither an int64 nor a float (stored as JSON). Numeric columns are read with
    numpy, never value by value."""

    def __init__(self, tags: dict[str, np.ndarray], bits: dict[str, np.ndarray],
                 slow: dict[str, list[Any]]) -> None:  # fmt: skip
        self.tags, self.bits, self.slow = tags, bits, slow

    @classmethod
    def of(cls, df: pd.DataFrame, cols: Sequence[str]) -> NewEvents:
        tags: dict[str, np.ndarray] = {}
        bits: dict[str, np.ndarray] = {}
        slow: dict[str, list[Any]] = {}
        for c in cols:
            got = _numeric(df[c])
            if got is None:
                vals = slow[c] = [json_value(v) for v in df[c].tolist()]
                t = [tag_of(v) for v in vals]
                tags[c] = np.array(t, dtype=np.uint8)
                bits[c] = np.array([bits_of(v, x) for v, x in zip(vals, t, strict=True)], np.int64)
            else:
                tags[c], bits[c] = got
        return cls(tags, bits, slow)

    def take(self, order: np.ndarray) -> NewEvents:
        picks = order.tolist()
        return NewEvents({c: a[order] for c, a in self.tags.items()},
                         {c: a[order] for c, a in self.bits.items()},
                         {c: [v[i] for i in picks] for c, v in self.slow.items()})  # fmt: skip

    def record(self, i: int) -> dict[str, Any]:
        """Row ``i`` as its JSON-safe record (what ``json_value`` gives each field)."""
        out: dict[str, Any] = {}
        for c, t in self.tags.items():
            if c in self.slow:
                out[c] = self.slow[c][i]
            else:
                tag, b = int(t[i]), int(self.bits[c][i])
                out[c] = None if tag == 0 else b if tag == 1 else _F64.unpack(_Q.pack(b))[0]
        return out


_F64, _Q = struct.Struct("<d"), struct.Struct("<q")


def _numeric(col: pd.Series) -> tuple[np.ndarray, np.ndarray] | None:
    """(tags, bits) of an int64 or float64 column (nullable or not) at once; None for any
    other dtype."""
    dtype = col.dtype
    if dtype == np.float64 or isinstance(dtype, pd.Float64Dtype):  # NaN and NA: null
        v = col.to_numpy(dtype=np.float64, na_value=np.nan)
        nan = np.isnan(v)
        return np.where(nan, 0, 2).astype(np.uint8), np.where(nan, 0, v.view(np.int64))
    if dtype == np.int64:
        return np.ones(len(col), np.uint8), col.to_numpy()
    if isinstance(dtype, pd.Int64Dtype):
        na = col.isna().to_numpy()
        return np.where(na, 0, 1).astype(np.uint8), col.to_numpy(dtype=np.int64, na_value=0)
    return None


class Events:
    """Raw events of a batch's keys (sorted by key, time, sequence), decoded at once."""

    def __init__(
        self,
        lay: Layout,
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
    def decode(cls, lay: Layout, kid: np.ndarray, items: list[tuple[bytes, bytes]]) -> Events:
        fields = lay.fields
        dt = raw_dtype(len(fields))
        vals = [v for _, v in items]
        json: dict[int, dict[str, Any]] = {}
        fast = packed(vals, dt)
        if fast is not None:
            arr = fast
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
        return cls.of(lay, kid, arr, json)

    @classmethod
    def of(
        cls, lay: Layout, kid: np.ndarray, arr: np.ndarray, json: dict[int, dict[str, Any]]
    ) -> Events:
        fields = lay.fields
        return cls(
            lay, kid, arr["ts"].astype(np.int64), arr["seq"].astype(np.uint64),
            {c: arr[f"t{j}"].astype(np.int8) for j, c in enumerate(fields)},
            {c: arr[f"x{j}"].astype(np.int64) for j, c in enumerate(fields)},
            json,
        )  # fmt: skip

    def merged(self, other: Events) -> Events:
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
        return Events(
            self.lay, kid[order], ts[order], seq[order],
            {c: cat([self.tag[c], other.tag[c]])[order] for c in self.lay.fields},
            {c: cat([self.bits[c], other.bits[c]])[order] for c in self.lay.fields},
            json,
        )  # fmt: skip

    def unique(self) -> Events:
        """Each event once (an event is its key, time and sequence), for the merged reads of
        scans that may overlap."""
        k, t, q = self.kid, self.ts, self.seq
        first = np.r_[True, (k[1:] != k[:-1]) | (t[1:] != t[:-1]) | (q[1:] != q[:-1])]
        if first.all():
            return self
        sel = np.flatnonzero(first)
        back = np.cumsum(first) - 1
        return Events(
            self.lay, k[sel], t[sel], q[sel],
            {c: a[sel] for c, a in self.tag.items()},
            {c: a[sel] for c, a in self.bits.items()},
            {int(back[i]): r for i, r in self.json.items() if first[i]},
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

    def table(self) -> Table:
        cols: dict[str, dict[str, np.ndarray]] = {}
        for col, squares in self.lay.cols.items():
            st = None if self.json else event_cols(self.tag[col], self.bits[col], squares)
            if st is None:
                st = stats_from_lists([event_stats(v, squares) for v in self.values(col)])
            cols[col] = st
        return Table(self.kid, self.ts, np.ones(len(self.kid), np.int64), cols)
