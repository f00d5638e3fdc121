"""Value formats of a continuous aggregate's state: raw event entries and tiles.

Raw event value: ``<B q Q`` (format 1, time, sequence), then per field (sorted) a tag byte
(0 null, 1 int64, 2 float64) and 8 bytes, little-endian; an event with any other value (a
string, a bool, an int beyond int64, a list...) is stored as its canonical JSON record
instead (which starts with ``{``). Tile value: ``<B q q`` (format 1, tile index, rows), then
per tiled column (sorted) ``<q q i i Q q Q q B 8s B 8s``: non-null count, float count,
exponents of the sum and of the sum of squares, their mantissas as 128-bit two's complement
(low, high), min and max (tag and 8 bytes as above); a tile whose numbers do not fit is
stored as JSON ``{"n": rows, "v": {column: [c, fc, sn, se, qn, qe, mn, mx]}}``. Both fixed
widths are decoded for a whole batch at once (``np.frombuffer``). Canonical: the same
events give the same bytes whatever the batching (sums canonical, min/max float iff fc).

A page (``Layout.page``: several tiles an entry, keyed by its first tile's index over the
page size) is its held tiles' values back to back in index order; where one does not fit,
the page is JSON ``{"p": [{"i": index, "n": rows, "v": ...}, ...]}``. A one-tile entry is a
page of one.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from fennel_dagster.ops.aggregate.layout import Layout
from fennel_dagster.ops.aggregate.stats import (
    EXACT_FLOAT,
    Table,
    align,
    common_scale,
    extremes,
    merge_tiles,
    pair_codes,
    stats_from_lists,
)
from fennel_dagster.ops.keys import FLIP, SUFFIX, flipped, suffixed
from fennel_dagster.ops.rows import dumps, loads

_TILE = SUFFIX
_I64_LO, _I64_HI = -(1 << 63), 1 << 63
_I128 = 1 << 127


_F64 = struct.Struct("<d")
_Q = struct.Struct("<q")


def tile_keys(prefixes: Sequence[bytes], size: int, idx: np.ndarray) -> list[bytes]:
    """``tile_key`` of each row (its key's prefix, tile index), the suffixes packed at once."""
    return suffixed(prefixes, np.full(len(prefixes), size, dtype=np.uint64), flipped(idx))


def tile_key(prefix: bytes, size: int, idx: int) -> bytes:
    return prefix + _TILE.pack(size, idx + FLIP)


def content_dtype(ncols: int) -> np.dtype:
    """An event's fields as ``events.event_seq`` hashes them: tag and value bits, packed."""
    return np.dtype([(n, t) for i in range(ncols) for n, t in ((f"t{i}", "u1"), (f"x{i}", "<i8"))])


def raw_dtype(ncols: int) -> np.dtype:
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


def tag_of(v: Any) -> int:
    """Binary tag of a JSON-safe value: 0 null, 1 int64, 2 float, 3 anything else."""
    if v is None:
        return 0
    t = type(v)
    if t is float:
        return 2
    if t is int and _I64_LO <= v < _I64_HI:
        return 1
    return 3


def bits_of(v: Any, tag: int) -> int:
    if tag == 1:
        return int(v)
    if tag == 2:
        return int(_Q.unpack(_F64.pack(v))[0])
    return 0


def encode_tile(idx: int, n: int, stats: list[list[Any]], names: list[str]) -> bytes:
    parts: list[Any] = [1, idx, n]
    fmt = ["<Bqq"]
    for c, fc, sn, se, qn, qe, mn, mx in stats:
        tn, tx = tag_of(mn), tag_of(mx)
        if (
            not -_I128 <= sn < _I128 or not -_I128 <= qn < _I128 or tn == 3 or tx == 3
            or not -(1 << 31) <= se < 1 << 31 or not -(1 << 31) <= qe < 1 << 31
        ):  # fmt: skip
            return dumps({"n": n, "v": dict(zip(names, stats, strict=True))})
        fmt.append("qqiiQqQqBqBq")
        m64 = (1 << 64) - 1
        parts += [c, fc, se, qe, sn & m64, sn >> 64, qn & m64, qn >> 64,
                  tn, bits_of(mn, tn), tx, bits_of(mx, tx)]  # fmt: skip
    return struct.pack("".join(fmt), *parts)


def packed_tiles(
    lay: Layout, t: Table, starts: np.ndarray, idx: np.ndarray, rows: np.ndarray
) -> np.ndarray | None:
    """Groups of tiles and events (``starts``: each group's first element in ``t``) merged
    into tiles packed in ``_tile_dtype``, with numpy: ``encode_tile`` of ``merge_tiles``,
    byte for byte. None when a value needs Python ints (sums past 61 bits, big ints)."""
    names = sorted(lay.cols)
    arr = np.zeros(len(starts), dtype=_tile_dtype(len(names)))
    arr["v"], arr["idx"], arr["n"] = 1, idx, rows
    total = len(t.n)
    for j, col in enumerate(names):
        st = t.cols[col]
        if any(st[k].dtype == object for k in ("sn", "qn", "mn", "mx")):
            return None
        scale = common_scale([t], col)
        c = np.add.reduceat(st["c"], starts)
        fc = np.add.reduceat(st["fc"], starts)
        arr[f"c{j}"], arr[f"fc{j}"] = c, fc
        for n, e, lo, hi, at in (
            ("sn", "se", "sl", "sh", scale),
            ("qn", "qe", "ql", "qh", 2 * scale),
        ):
            aligned = align(st[n], st[e], at, total)
            if aligned.dtype == object:
                return None
            mant, exp = _canonical(np.add.reduceat(aligned, starts), at)
            if len(exp) and not (-(1 << 31) <= exp.min() and exp.max() < 1 << 31):
                return None
            arr[f"{e}{j}"] = exp
            arr[f"{lo}{j}"] = mant.view(np.uint64)
            arr[f"{hi}{j}"] = mant >> 63
        empty, isf = c == 0, fc > 0
        for tag, bits, v in (("nt", "mn", np.minimum.reduceat(st["mn"], starts)),
                             ("xt", "mx", np.maximum.reduceat(st["mx"], starts))):  # fmt: skip
            v = np.where(empty, 0.0, v) + 0.0  # -0.0 and 0.0 tie: store one of them
            arr[f"{tag}{j}"] = np.where(empty, 0, np.where(isf, 2, 1))
            # a float tile keeps its bits; the cast is of int tiles only (inf, nan: no int)
            as_int = np.where(isf, 0.0, v).astype(np.int64)
            arr[f"{bits}{j}"] = np.where(isf, v.view(np.int64), as_int)
    return arr


def _canonical(s: np.ndarray, e: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """``tiles.canonical`` of int64 mantissas ``s`` with exponents ``e``, all at once."""
    nz = s != 0
    low = s & -s  # the lowest set bit (2**63 wraps to -2**63: frexp still gives 64)
    tz = np.where(nz, np.frexp(low.astype(np.float64))[1] - 1, 0).astype(np.int64)
    return np.where(nz, s >> tz, 0), np.where(nz, e + tz, 0)


def event_cols(tag: np.ndarray, bits: np.ndarray, squares: bool) -> dict[str, np.ndarray] | None:
    """Partial aggregates of single events from their binary values (None: needs the slow
    path, a value that is not an int64 or a float)."""
    if (tag == 3).any():
        return None
    isint, isf = tag == 1, tag == 2
    f = np.where(isf, bits.view(np.float64), 0.0)
    if np.isinf(f).any():
        raise ValueError("sum/avg/stddev of an infinite value")
    m, e = np.frexp(f)
    sn = np.where(isint, bits, (m * float(EXACT_FLOAT)).astype(np.int64))
    se = np.where(isint, 0, e.astype(np.int64) - 53)
    # canonical (odd mantissas): 37.0 is 37 * 2**0, so sums of such floats stay in int64
    sn, se = _canonical(sn, se)
    out = {"c": (tag != 0).astype(np.int64), "fc": isf.astype(np.int64), "sn": sn, "se": se}
    if squares:
        if len(sn) and np.abs(sn).max() < 1 << 31:
            out["qn"], out["qe"] = sn * sn, 2 * se
        else:
            obj = sn.astype(object)
            out["qn"], out["qe"] = obj * obj, 2 * se
    else:
        out["qn"], out["qe"] = np.zeros(len(tag), np.int64), 2 * se
    if (isint & ((bits > EXACT_FLOAT) | (bits < -EXACT_FLOAT))).any():
        vals: list[int | float | None] = [
            None if t == 0 else int(b) for t, b in zip(tag.tolist(), bits.tolist(), strict=True)
        ]
        vals = [
            v if t != 2 else float(x)
            for v, t, x in zip(vals, tag.tolist(), f.tolist(), strict=True)
        ]
        out["mn"], out["mx"] = extremes(vals)
    else:
        val = np.where(isf, f, bits.astype(np.float64))
        out["mn"] = np.where(tag == 0, np.inf, val)
        out["mx"] = np.where(tag == 0, -np.inf, val)
    return out


def decode_tiles(
    lay: Layout, kid: np.ndarray, items: list[tuple[bytes, bytes]] | list[bytes]
) -> Table:
    """The tiles of entries (pages) read, ``kid[i]`` the key id of ``items[i]``; a JSON
    value needs its key (``items`` as pairs)."""
    names = sorted(lay.cols)
    dt = _tile_dtype(len(names))
    vals = [it if isinstance(it, bytes) else it[1] for it in items]
    # none read: int64 columns all the same, or every merge with this batch's events would
    # take Python's ints (``packed_tiles`` refuses object columns)
    found = _records(vals, dt)
    if found is None:
        return _decode_tiles_slow(lay, kid, items, names, dt)
    arr, per = found
    return tiles_table(np.repeat(kid, per), arr, names)


def _records(vals: list[bytes], dt: np.dtype) -> tuple[np.ndarray, np.ndarray] | None:
    """The binary records of the values (each a page of one or more) as one array of ``dt``
    and how many each value holds; None when some value is not binary records of format 1
    (JSON starts with a brace, never byte 1, and holds no byte 1)."""
    lens = np.fromiter(map(len, vals), dtype=np.int64, count=len(vals))
    if (lens % dt.itemsize).any():
        return None
    arr = np.frombuffer(b"".join(vals), dtype=dt)
    return (arr, lens // dt.itemsize) if (arr["v"] == 1).all() else None


def tile_pages(lay: Layout, t: Table, page: int) -> tuple[np.ndarray, np.ndarray, list[bytes]]:
    """Every page of tiles ``t`` (sorted by key id and index, holding all of each page's
    tiles): its key id, its page index and its value."""
    n = len(t.kid)
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), []
    pages = t.pos // page
    (code,) = pair_codes([t.kid], [pages])
    starts = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])
    ends = np.r_[starts[1:], n].tolist()
    arr = packed_tiles(lay, t, np.arange(n), t.pos, t.n)
    if arr is not None:
        w = arr.dtype.itemsize
        buf = arr.tobytes()
        values = [buf[a * w : b * w] for a, b in zip(starts.tolist(), ends, strict=True)]
        return t.kid[starts], pages[starts], values
    names = sorted(lay.cols)
    merged = merge_tiles(lay, t, np.arange(n), n)
    idx = t.pos.tolist()
    values = []
    for a, b in zip(starts.tolist(), ends, strict=True):
        one = [encode_tile(idx[i], *merged[i], names) for i in range(a, b)]
        if page == 1 or not any(v[:1] == b"{" for v in one):
            values.append(b"".join(one))
            continue
        tiles = [{"i": idx[i], "n": merged[i][0], "v": dict(zip(names, merged[i][1], strict=True))}
                 for i in range(a, b)]  # fmt: skip
        values.append(dumps({"p": tiles}))
    return t.kid[starts], pages[starts], values


def packed(vals: list[bytes], dt: np.dtype) -> np.ndarray | None:
    """The values as one array of ``dt`` when each is one binary record of it (its first
    byte, ``v``, the format's version 1); None when any is not (JSON, another version)."""
    found = _records(vals, dt)
    return found[0] if found is not None and (found[1] == 1).all() else None


def tiles_table(kid: np.ndarray, arr: np.ndarray, names: list[str]) -> Table:
    """Tiles packed in ``_tile_dtype`` (read, or just merged) as a ``Table``."""
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
            if (isint & ((bits > EXACT_FLOAT) | (bits < -EXACT_FLOAT))).any():
                vals2 = [None if a == 0 else int(b) if a == 1 else _F64.unpack(_Q.pack(b))[0]
                         for a, b in zip(tag.tolist(), bits.tolist(), strict=True)]  # fmt: skip
                st[key] = extremes(vals2)[0 if key == "mn" else 1]
            else:
                val = np.where(isint, bits.astype(np.float64), bits.view(np.float64))
                st[key] = np.where(tag == 0, fill, val)
        cols[c] = st
    return Table(kid, arr["idx"].astype(np.int64), arr["n"].astype(np.int64), cols)


def _decode_tiles_slow(
    lay: Layout, kid: np.ndarray, items: Any, names: list[str], dt: np.dtype
) -> Table:
    idx: list[int] = []
    rows: list[int] = []
    kids: list[int] = []
    per: dict[str, list[list[Any]]] = {c: [] for c in names}
    empty = [0, 0, 0, 0, 0, 0, None, None]
    for (k, v), kd in zip(items, kid.tolist(), strict=True):
        if v[:1] == b"{":
            # a one-tile entry's JSON has the index in its key; a page's, in each tile
            got = loads(v)
            tiles = (
                got["p"] if "p" in got else [{"i": _TILE.unpack(k[-_TILE.size :])[1] - FLIP, **got}]
            )
            for d in tiles:
                kids.append(kd)
                idx.append(d["i"])
                rows.append(d["n"])
                for c in names:
                    per[c].append(d["v"].get(c, empty))
            continue
        for a in np.frombuffer(v, dtype=dt):
            _slow_record(a, names, kd, kids, idx, rows, per)
    cols = {c: stats_from_lists(per[c]) for c in names}
    return Table(np.array(kids, np.int64), np.array(idx, np.int64), np.array(rows, np.int64),
                 cols)  # fmt: skip


def _slow_record(
    a: Any,
    names: list[str],
    kd: int,
    kids: list[int],
    idx: list[int],
    rows: list[int],
    per: dict[str, list[list[Any]]],
) -> None:
    """Append one binary tile record, its sums as Python ints."""
    kids.append(kd)
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
