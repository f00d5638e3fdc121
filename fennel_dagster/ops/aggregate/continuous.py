"""Continuous and ``forever`` windows: record a batch's events and tile updates, and every
aggregation at each (key, time) query, assembled from raw edge events and whole tiles."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fennel_dagster.errors import ExecutionError
from fennel_dagster.ops import tiles
from fennel_dagster.ops.aggregate.codec import (
    content_dtype,
    decode_tiles,
    encode_tile,
    packed_tiles,
    raw_dtype,
    tile_key,
    tile_keys,
    tile_pages,
    tiles_table,
)
from fennel_dagster.ops.aggregate.edges import (
    Edges,
    check_until,
    edge_sizes,
    held_tiles,
    late,
    with_fresh,
)
from fennel_dagster.ops.aggregate.events import (
    Events,
    NewEvents,
    event_seq,
    event_seqs,
    free_seqs,
    key_tuples,
    namespace,
    tiles_namespace,
)
from fennel_dagster.ops.aggregate.layout import TOP_PAGE, Layout, lows, of_columns, wkey
from fennel_dagster.ops.aggregate.newest import newest_held, record_newest
from fennel_dagster.ops.aggregate.stats import (
    Source,
    Table,
    align,
    common_scale,
    merge_tiles,
    pair_codes,
    sorted_table,
)
from fennel_dagster.ops.aggregate.values import Values, aggregate_values, finish
from fennel_dagster.ops.columns import utc
from fennel_dagster.ops.keys import entries, key_prefixes, row_bytes
from fennel_dagster.ops.rows import dumps
from fennel_dagster.ops.state import REWRITTEN_SUFFIX, OverlayReader, StateReader, WriteBatch
from fennel_dagster.wire import spec


class StateFormatError(ExecutionError):
    """An aggregate's state in a layout this version cannot read."""


def _scan_merged(
    reader: StateReader,
    ns: str,
    qk: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    prefixes: list[bytes],
    keys_at: Callable[[list[bytes], np.ndarray], list[bytes]],
    slack: np.ndarray | None = None,
) -> tuple[list[tuple[bytes, bytes]], list[int]]:
    """The entries of ``ns`` in every query's ``[lo, hi)`` (column j: query j, of key id
    ``qk[j]``, whose prefix is ``prefixes[qk[j]]``), each key's intervals merged first so no
    entry is read twice, and with ``slack`` (per key id) joined across gaps no longer than it
    (a seek costs more than a few entries read past); returns them in key-id order and how
    many each key id got. ``keys_at(prefixes, positions)`` makes the bounds' keys at once.
    Callers locate what they need in the result, so entries of a gap read through are never
    counted."""
    qks = np.broadcast_to(qk, lo.shape).ravel()
    g, a, b = tiles.merge_grouped(qks, lo.ravel(), hi.ravel(), slack)
    gs = g.tolist()
    own = [prefixes[k] for k in gs]
    bounds = list(zip(keys_at(own, a), keys_at(own, b), strict=True))
    items, counts = reader.scan_ranges(ns, bounds)
    found = np.bincount(np.asarray(gs, dtype=np.int64), weights=counts, minlength=len(prefixes))
    return items, found.astype(np.int64).tolist()


def _entries_at(prefixes: list[bytes], ts: np.ndarray) -> list[bytes]:
    """The first entry key at each time (sequence 0)."""
    return entries(prefixes, ts, np.zeros(len(ts), np.uint64))


def _tiles_at(size: int) -> Callable[[list[bytes], np.ndarray], list[bytes]]:
    return lambda prefixes, idx: tile_keys(prefixes, size, idx)


@dataclass
class _Reads:
    """A batch's range reads of one node's state: queries sorted by key id (``qk``), each
    key id's state prefix, and per key id the slack its reads are joined across."""

    lay: Layout
    reader: StateReader
    ns: str
    qk: np.ndarray
    prefixes: list[bytes]
    span: np.ndarray | None

    def raw(self, sel: np.ndarray | slice, bounds: list[tuple[np.ndarray, np.ndarray]]) -> Events:
        """The events held in the bounds (column j: query j of ``qk[sel]``)."""
        items, counts = _scan_merged(
            self.reader, self.ns, self.qk[sel], np.stack([a[sel] for a, _ in bounds]),
            np.stack([b[sel] for _, b in bounds]), self.prefixes, _entries_at, self.span,
        )  # fmt: skip
        return Events.decode(self.lay, np.repeat(np.arange(len(counts)), counts), items)

    def tiles(self, size: int, bounds: list[tuple[np.ndarray, np.ndarray]]) -> Table:
        """The tiles of ``size`` held at the tile indexes of the bounds, and the other tiles
        of their pages (every tile of a page read, so a batch can write the page back)."""
        page = self.lay.page(size)
        lo = np.stack([a for a, _ in bounds]) // page
        up = -(-np.stack([b for _, b in bounds]) // page)
        slack = None if self.span is None else self.span // (size * page) + 1
        items, counts = _scan_merged(self.reader, self.ns + REWRITTEN_SUFFIX, self.qk, lo, up,
                                     self.prefixes, _tiles_at(size), slack)  # fmt: skip
        return decode_tiles(self.lay, np.repeat(np.arange(len(counts)), counts), items)


def _only(where: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bounds ``[lo, hi)`` where ``where`` holds, empty (``[0, 0)``) elsewhere."""
    return np.where(where, lo, 0), np.where(where, hi, 0)


def _page_start(lay: Layout, size: int, at: np.ndarray) -> np.ndarray:
    """The time the page of tiles of ``size`` holding each time starts."""
    span = size * lay.page(size)
    return at // span * span


def _compute(
    lay: Layout,
    reader: StateReader,
    ns: str,
    keys: Sequence[tuple[Any, ...]],
    hi_us: np.ndarray,
    new: NewEvents | None = None,
    wb: WriteBatch | None = None,
) -> dict[str, Values]:
    """Every aggregation at each (key, time) query; with ``new`` (one record per query, the
    batch's events), records them first. Per key a few range scans; then everything (binary
    decoding, tile updates, window values) at once with numpy over the batch."""
    n = len(keys)
    ids: dict[tuple[Any, ...], int] = {}
    kid = np.array([ids.setdefault(k, len(ids)) for k in keys], dtype=np.int64)
    order = np.argsort(kid, kind="stable")
    qk, hi = kid[order], hi_us[order].astype(np.int64)
    plans = {w: tiles.plan(lv, lows(w, hi), hi) for w, lv in lay.windows.items()}
    raw_lows = [lows(wkey(a.window), hi) for a in lay.raw]
    tops = edge_sizes(lay, hi) if new is not None else None
    # the instants of new events (their sequences may clash with events held); with edge
    # tiles, on to the end of the coarsest: an event held there after a query rules it out
    until = hi + 1 if tops is None else check_until(hi, tops)
    by_id = list(ids)
    prefixes = key_prefixes(by_id)
    # Recording a batch, a key's queries span the batch's time for it, and so do the gaps
    # between their intervals at each edge of the window: reading through a gap reads about
    # as many entries as the batch brings the key, in one seek instead of one per query.
    span = None
    if new is not None and n:
        starts = np.flatnonzero(np.r_[True, qk[1:] != qk[:-1]])
        span = np.maximum.reduceat(hi, starts) - np.minimum.reduceat(hi, starts)
    reads = _Reads(lay, reader, ns, qk, prefixes, span)

    levels: dict[int, Table] = {}
    # Each window's left end lies in one tile of its top level. When every window has the
    # same top, that level is read first, with those tiles: where one is not held (a key
    # newer than the window), the finer tiles and raw events of its left end are not sought.
    left = {w: np.ones(n, dtype=bool) for w in plans}
    top = next(iter(set(tops.values()))) if tops and len(set(tops.values())) == 1 else None
    if top is not None:
        ends = {w: lows(w, hi) // top for w in plans}
        bounds = [(hi // top, hi // top + 1)] + [(e, e + 1) for e in ends.values()]
        bounds += [(p.tiles[0][1], p.tiles[0][2]) for p in plans.values()]
        levels[top] = reads.tiles(top, bounds)
        at_top = Source(levels[top].kid, levels[top].pos, levels[top].n)
        left = {w: np.diff(at_top.locate(qk, [e, e + 1]), axis=0)[0] > 0 for w, e in ends.items()}
    # Recording, a query reads the raw events from its time on (a later one rules its edge
    # tile out; one at its instant holds a sequence) only where its key holds such an event.
    held_newest = newest_held(reader, ns, prefixes) if new is not None else None
    after = np.ones(n, dtype=bool) if held_newest is None else held_newest[qk] >= hi
    raw_bounds: list[tuple[np.ndarray, np.ndarray]] = [_only(after, hi, until)]
    raw_bounds += [(lo, hi + 1) for lo in raw_lows]
    for w, p in plans.items():
        raw_bounds.append(_only(left[w], p.la, p.lb))
        if not tops:
            raw_bounds.append((p.ra, p.rb))
    events = reads.raw(slice(None), raw_bounds)
    is_late = np.ones(n, dtype=bool) if tops is None else late(events, qk, hi, until)
    if tops is not None and is_late.any():  # these read their right ends as lookups do
        more = reads.raw(is_late, [(p.ra, p.rb) for p in plans.values()])
        events = events.merged(more).unique()
    # the tile each query records into, where its key may hold its page: an event there or
    # later (a batch writes back the whole page, so it reads every tile of it)
    tile_bounds: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {
        s: []
        if held_newest is None
        else [_only(held_newest[qk] >= _page_start(lay, s, hi), hi // s, hi // s + 1)]
        for s in lay.sizes
        if s != top
    }
    for w, p in plans.items():
        for size, l0, l1, r0, r1 in p.tiles:
            if size != top:
                tile_bounds[size] += [_only(left[w], l0, l1), _only(is_late, r0, r1)]
    for size, bs in tile_bounds.items():
        if bs:
            levels[size] = reads.tiles(size, bs)
    use = ~is_late
    held = {}  # each edge tile as held, before the batch folds into it
    if tops is not None:
        held = {t: held_tiles(levels[t], qk[use], hi[use] // t, t) for t in set(tops.values())}
    fresh: Events | None = None
    fresh_table: Table | None = None
    if new is not None:
        assert wb is not None
        fresh = _store_events(lay, ns, prefixes, events, qk, hi, new.take(order), by_id, wb)
        assert held_newest is not None
        record_newest(wb, ns, prefixes, held_newest, qk, hi)
        if lay.tiled:
            fresh_table = fresh.table()
            _fold_tiles(lay, ns + REWRITTEN_SUFFIX, prefixes, fresh_table, levels, wb)

    out: dict[str, Values] = {}
    if lay.tiled:
        read = events.table()
        tables: dict[int | None, Table] = {
            None: sorted_table(read if fresh_table is None else Table.concat([read, fresh_table])),
            **{s: sorted_table(t) for s, t in levels.items()},
        }
        edges = None
        if tops is not None and fresh_table is not None:
            edges = with_fresh(tops, use, held, fresh_table)
        out.update(_tiled_values(lay, plans, qk, hi, tables, edges))
    if lay.raw:
        if fresh is not None:
            events = events.merged(fresh)
        out.update(_raw_values(lay, events, qk, hi, raw_lows))
    back = np.empty(n, dtype=np.int64)
    back[order] = np.arange(n)
    picks = back.tolist()
    return {
        into: col[back] if isinstance(col, np.ndarray) else [col[i] for i in picks]
        for into, col in out.items()
    }


def _raw_values(
    lay: Layout, events: Events, qk: np.ndarray, hi: np.ndarray, raw_lows: list[np.ndarray]
) -> dict[str, list[Any]]:
    """The aggregations assembled from raw events (LastK, Distinct, ...), per query."""
    raw = Source(events.kid, events.ts, np.ones(len(events.kid), np.int64))
    ends_at = raw.locate(qk, [hi + 1])[0]
    values = {a.of: events.values(a.of) for a in lay.raw if a.of}
    stamps = events.ts.tolist()
    at = hi.tolist()  # each query's time (an exponential decay measures ages from it)
    out: dict[str, list[Any]] = {}
    for agg, lo in zip(lay.raw, raw_lows, strict=True):
        begins = raw.locate(qk, [lo])[0]
        col = values[agg.of] if agg.of else None
        out[agg.into] = [
            aggregate_values(agg, col[x:y] if col is not None else [1] * (y - x), stamps[x:y], t)
            for x, y, t in zip(begins.tolist(), ends_at.tolist(), at, strict=True)
        ]
    return out


def _store_events(
    lay: Layout,
    ns: str,
    prefixes: list[bytes],
    events: Events,
    qk: np.ndarray,
    hi: np.ndarray,
    recs: NewEvents,
    by_id: list[tuple[Any, ...]],
    wb: WriteBatch,
) -> Events:
    """Store the batch's events as raw entries (``wb``), each with a sequence no event held at
    its instant has; return them."""
    fields = lay.fields
    dt = raw_dtype(len(fields))
    # the sequences held at each instant a new event takes: only those instants can collide
    # (the events read span the batch's gaps and window edges, mostly at other instants)
    near = np.isin(events.ts, hi)
    held = (events.kid[near], events.ts[near], events.seq[near])
    kids = qk.tolist()
    m = len(kids)
    arr = np.zeros(m, dtype=dt)
    arr["v"] = 1
    arr["ts"] = hi
    json: dict[int, dict[str, Any]] = {}
    content = np.zeros(m, dtype=content_dtype(len(fields)))
    odd = np.zeros(m, dtype=bool)
    for j, c in enumerate(fields):
        content[f"t{j}"] = arr[f"t{j}"] = recs.tags[c]
        content[f"x{j}"] = arr[f"x{j}"] = recs.bits[c]
        odd |= recs.tags[c] == 3
    for i in np.flatnonzero(odd).tolist():
        json[i] = recs.record(i)
    row_prefixes = [prefixes[k] for k in kids]
    base = event_seqs(row_prefixes, content)
    for i in json:
        base[i] = event_seq(json[i], by_id[kids[i]])
    arr["seq"] = free_seqs(qk, hi, base, held)
    values = row_bytes(arr)
    for i, rec in json.items():
        values[i] = dumps(rec)
    keys = entries(row_prefixes, hi, arr["seq"])
    wb.space(ns).update(zip(keys, values, strict=True))
    for j in range(len(fields)):
        for i in json:
            arr[f"t{j}"][i] = 3
    return Events.of(lay, qk, arr, json)


def _fold_tiles(
    lay: Layout,
    tns: str,
    prefixes: list[bytes],
    fresh: Table,
    levels: dict[int, Table],
    wb: WriteBatch,
) -> None:
    """Fold the batch's events (``fresh``) into their tiles at every level (``wb``), and
    replace the tiles they touch in ``levels``."""
    put = wb.space(tns)
    names = sorted(lay.cols)
    if not len(fresh.kid):
        return
    for size, old in levels.items():
        idx = fresh.pos // size
        old_code, new_code = pair_codes([old.kid, fresh.kid], [old.pos, idx])
        groups, gid_new = np.unique(new_code, return_inverse=True)
        # the held tiles the batch folds into: their codes among the batch's (sorted) groups
        at = np.minimum(np.searchsorted(groups, old_code), len(groups) - 1)
        hit = groups[at] == old_code
        old_rows = np.flatnonzero(hit)
        gid = np.concatenate([at[old_rows], gid_new])
        both = Table.concat([old.take(old_rows), Table(fresh.kid, idx, fresh.n, fresh.cols)])
        srt = np.argsort(gid, kind="stable")
        both, gid = both.take(srt), gid[srt]
        first = np.searchsorted(gid, np.arange(len(groups)))
        g_kid, g_idx = both.kid[first].tolist(), both.pos[first].tolist()
        rows_of = np.add.reduceat(both.n, first)
        packed = packed_tiles(lay, both, first, both.pos[first], rows_of)
        paged = lay.page(size) > 1
        if packed is not None:
            if not paged:
                keys = tile_keys([prefixes[k] for k in g_kid], size, both.pos[first])
                put.update(zip(keys, row_bytes(packed), strict=True))
            merged_tiles = tiles_table(both.kid[first], packed, names)
        else:  # sums past 61 bits or big ints: Python's ints
            items: list[tuple[bytes, bytes]] = []
            merged = merge_tiles(lay, both, gid, len(groups))
            for k, i, (rows, stats) in zip(g_kid, g_idx, merged, strict=True):
                items.append((tile_key(prefixes[k], size, i), encode_tile(i, rows, stats, names)))
            if not paged:
                put.update(items)
            merged_tiles = decode_tiles(lay, both.kid[first], items)
        keep = old.take(np.flatnonzero(~hit))
        levels[size] = Table.concat([keep, merged_tiles])
        if paged:
            _write_pages(lay, put, prefixes, size, levels[size], both.kid[first], both.pos[first])


def _write_pages(
    lay: Layout,
    put: dict[bytes, bytes | None],
    prefixes: list[bytes],
    size: int,
    held: Table,
    kid: np.ndarray,
    idx: np.ndarray,
) -> None:
    """Write back each page of ``size`` holding a tile (``kid``, ``idx``) the batch folded
    into, with every tile of it in ``held`` (the tiles read, the batch's folded in)."""
    page = lay.page(size)
    have, touched = pair_codes([held.kid, kid], [held.pos // page, idx // page])
    rows = sorted_table(held.take(np.flatnonzero(np.isin(have, touched))))
    kids, pages, values = tile_pages(lay, rows, page)
    keys = tile_keys([prefixes[k] for k in kids.tolist()], size, pages)
    put.update(zip(keys, values, strict=True))


def _tiled_values(
    lay: Layout,
    plans: dict[tuple[str, int | None], tiles.Plan],
    qk: np.ndarray,
    hi: np.ndarray,
    tables: dict[int | None, Table],
    edges: Edges | None = None,
) -> dict[str, Values]:
    every: dict[int | None | tuple[str, int], Table] = dict(tables.items())
    if edges is not None:
        every.update({("edge", t): table for t, table in edges.tables.items()})
    srcs = {w: Source(t.kid, t.pos, t.n) for w, t in every.items()}
    total = sum(len(t.kid) for t in every.values())
    scales: dict[str, int] = {}
    for col, squares in lay.cols.items():
        scale = common_scale(list(every.values()), col)
        for where, t in every.items():
            st = t.cols[col]
            arrays = {
                "c": tiles.prefix(st["c"]),
                "fc": tiles.prefix(st["fc"]),
                "s": tiles.prefix(align(st["sn"], st["se"], scale, total)),
            }
            if col in lay.extremes:
                arrays["mn"], arrays["mx"] = st["mn"], st["mx"]
            if squares:
                arrays["q"] = tiles.prefix(align(st["qn"], st["qe"], 2 * scale, total))
            srcs[where].cols[col] = arrays
        scales[col] = scale
    raw = srcs[None]

    out: dict[str, Values] = {}
    for w, p in plans.items():
        # queries with an edge tile take their right end from it alone (the rest emptied)
        use = np.zeros(len(qk), dtype=bool) if edges is None else edges.use
        la, lb, ra, rb = raw.locate(qk, [p.la, p.lb, p.ra, p.rb])
        pieces = [(raw, la, lb), (raw, np.where(use, rb, ra), rb)]
        for size, l0, l1, r0, r1 in p.tiles:
            src = srcs[size]
            i0, i1, j0, j1 = src.locate(qk, [l0, l1, r0, r1])
            pieces += [(src, i0, i1), (src, np.where(use, j1, j0), j1)]
        if edges is not None:
            top = edges.size[w]
            src = srcs[("edge", top)]
            e0, e1 = src.locate(qk, [(hi + 1) // top * top, hi + 1])
            pieces.append((src, np.where(use, e0, e1), e1))

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

        for a in (a for a in lay.tiled if wkey(a.window) == w):
            out[a.into] = finish(a, total_of, extreme, scales.get(a.of or "", 0))
    return out


def _own_view(state: StateReader, wb: WriteBatch, names: Sequence[str]) -> OverlayReader:
    """An overlay of ``wb``'s pending writes to ``names`` only (scans then skip the rest)."""
    return OverlayReader(state, wb.only(names))


def values_at(
    reader: StateReader,
    ns: str,
    node: spec.AggregateNode,
    keys: Sequence[tuple[Any, ...]],
    stamps_us: Sequence[int],
) -> dict[str, list[Any]]:
    """Each continuous aggregation of ``node`` for each (key, time) query."""
    lay = layout_of(node, reader, ns)
    out = _compute(lay, reader, ns, keys, np.asarray(stamps_us, dtype=np.int64))
    return {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in out.items()}


# In the tiles namespace, before every key's tiles (a key prefix starts with "["): which tile
# levels the state holds, and how. b"p<n>": ``tiles.levels``, each window's top level in
# pages of n tiles; b"2": ``tiles.levels``, a tile an entry; b"1": the legacy levels (state
# written before the marker, whose tiles stop at 64 s, is read with those). A state keeps
# the layout it was first written with.
LEVELS_KEY = b"\x00levels"


def layout_of(
    node: spec.AggregateNode, reader: StateReader, ns: str, wb: WriteBatch | None = None
) -> Layout:
    """The node's layout as its state was written; with ``wb``, the marker of a new state."""
    tns = ns + REWRITTEN_SUFFIX
    mark = reader.get(tns, LEVELS_KEY)
    if mark is None:
        legacy = next(iter(reader.scan(ns, b"")), None) is not None
        mark = b"1" if legacy else b"p%d" % TOP_PAGE
        if wb is not None:
            wb.put(tns, LEVELS_KEY, mark)
    if mark[:1] == b"p":
        return Layout.of(node, page=int(mark[1:]))
    if mark not in (b"1", b"2"):
        raise StateFormatError(
            f"aggregate state {ns!r}: unknown tile layout marker {mark!r}; it was written by "
            "a newer fennel_dagster: run that version, or replay the job from its inputs"
        )
    return Layout.of(node, legacy=mark == b"1")


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
    mine = (ns, tiles_namespace(scope, node))
    # A batch reads each key's entries before writing them, and keys' entries are disjoint,
    # so only writes made before this call (none, usually) need an overlay.
    pending = any(wb.touches(name) for name in mine)
    if isinstance(state, OverlayReader):  # an earlier group's writes: merged only if ours
        state = state.narrowed(mine)
    reader = _own_view(state, wb, mine) if pending else state
    lay = layout_of(node, reader, ns, wb)
    cols = of_columns(node)
    keys = key_tuples(df, node.keys)
    stamps = utc(df[ts_col])
    us = stamps.array.asi8 // 1000
    out_vals = _compute(lay, reader, ns, keys, us, NewEvents.of(df, cols), wb)
    out = df[list(node.keys)].reset_index(drop=True).copy()
    for a in node.aggs:
        vals = out_vals[a.into]
        out[a.into] = (
            pd.Series(vals) if isinstance(vals, np.ndarray) else pd.Series(vals, dtype=object)
        )
    out[ts_col] = stamps
    return out
