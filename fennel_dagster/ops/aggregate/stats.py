"""Columnar partial aggregates of events and tiles: per element the row count, and per column
the non-null count, float count, exact sum and sum of squares (dyadic integers: mantissa and
exponent), min and max; merged into tiles with grouped sums, and searched per key as prefix
sums (``Source``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fennel_dagster.ops import tiles
from fennel_dagster.ops.aggregate.layout import Layout

EXACT_FLOAT = 1 << 53  # ints up to this are exact as float64


@dataclass
class Table:
    """Elements (events or tiles) of a batch's keys: key id, position (time or tile index),
    rows, and per column the partial aggregates as arrays (``sn``/``qn``: int64 or Python
    ints; ``mn``/``mx``: float64 when exact, else objects; empty: +inf/-inf)."""

    kid: np.ndarray
    pos: np.ndarray
    n: np.ndarray
    cols: dict[str, dict[str, np.ndarray]]

    def take(self, sel: np.ndarray) -> Table:
        cols = {c: {k: a[sel] for k, a in d.items()} for c, d in self.cols.items()}
        return Table(self.kid[sel], self.pos[sel], self.n[sel], cols)

    @staticmethod
    def concat(parts: list[Table]) -> Table:
        cols = {
            c: {k: np.concatenate([p.cols[c][k] for p in parts]) for k in parts[0].cols[c]}
            for c in parts[0].cols
        }
        cat = np.concatenate
        return Table(
            cat([p.kid for p in parts]), cat([p.pos for p in parts]), cat([p.n for p in parts]),
            cols,
        )  # fmt: skip


def _objects(values: list[Any]) -> np.ndarray:
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr


def extremes(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    big = any(type(v) is int and not -EXACT_FLOAT <= v <= EXACT_FLOAT for v in values)
    if big:
        return (
            _objects([np.inf if v is None else v for v in values]),
            _objects([-np.inf if v is None else v for v in values]),
        )
    arr = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    none = np.isnan(arr)
    return np.where(none, np.inf, arr), np.where(none, -np.inf, arr)


def stats_from_lists(stats: list[list[Any]]) -> dict[str, np.ndarray]:
    """Per element ``[c, fc, sn, se, qn, qe, mn, mx]`` -> column arrays (the slow path)."""
    mn, _ = extremes([s[6] for s in stats])
    _, mx = extremes([s[7] for s in stats])
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


def event_stats(v: Any, squares: bool) -> list[Any]:
    if v is None:
        return [0, 0, 0, 0, 0, 0, None, None]
    n, e = tiles.exact(v)
    return [1, int(isinstance(v, float)), n, e, n * n if squares else 0, 2 * e, v, v]


def align(sn: np.ndarray, se: np.ndarray, scale: int, total: int) -> np.ndarray:
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


def common_scale(tables: list[Table], col: str) -> int:
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


def merge_tiles(
    lay: Layout, t: Table, gid: np.ndarray, ngroups: int
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
        scale = common_scale([t], col)
        c = np.add.reduceat(st["c"], starts).tolist()
        fc = np.add.reduceat(st["fc"], starts).tolist()
        s = np.add.reduceat(align(st["sn"], st["se"], scale, total), starts).tolist()
        q = np.add.reduceat(align(st["qn"], st["qe"], 2 * scale, total), starts).tolist()
        mn = np.minimum.reduceat(st["mn"], starts).tolist()
        mx = np.maximum.reduceat(st["mx"], starts).tolist()
        out: list[list[Any]] = []
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


class Source:
    """Events, or one tile level, of every key of a batch: sorted by (key, position), with
    prefix sums and min/max arrays per column, searched per key with ``locate``."""

    def __init__(self, keys: np.ndarray, pos: np.ndarray, n: np.ndarray) -> None:
        self.keys = keys
        self.pos = pos
        self.n = tiles.prefix(n)
        self.cols: dict[str, dict[str, np.ndarray]] = {}
        self._packing: tuple[int, int, np.ndarray | None] | None = None

    def locate(self, qkeys: np.ndarray, bounds: list[np.ndarray]) -> list[np.ndarray]:
        """Per bound array: the index of the first entry of the query's key at or after it."""
        if not len(self.pos):  # nothing held (a lookup between a key's events): all at 0
            return [np.zeros(len(qkeys), dtype=np.int64) for _ in bounds]
        flat = self._locate_flat(qkeys, bounds)
        return flat if flat is not None else self._locate_ranked(qkeys, bounds)

    def _locate_flat(self, qkeys: np.ndarray, bounds: list[np.ndarray]) -> list[np.ndarray] | None:
        """``locate`` by one int64 per (key, position): ``key * span + position``, with bounds
        clipped to just outside the positions held (which changes no answer). None when that
        would not fit 62 bits (positions spread over ages times many keys)."""
        if not len(self.pos) or not len(qkeys):
            return None
        lo, hi, mine = self._packed()
        span = hi - lo + 3
        if mine is None or span * (int(qkeys.max()) + 1) >= 1 << 62 or int(qkeys.min()) < 0:
            return None
        base = qkeys * span
        return [
            np.searchsorted(mine, base + (np.clip(b, lo - 1, hi + 1) - lo + 1), "left")
            for b in bounds
        ]

    def _packed(self) -> tuple[int, int, np.ndarray | None]:
        """The positions' bounds and the entries packed (None where that would not fit in 62
        bits): once, though a batch locates in one source many times."""
        if self._packing is None:
            lo, hi = int(self.pos.min()), int(self.pos.max())
            span, keys = hi - lo + 3, int(self.keys.max()) + 1
            mine = self.keys * span + (self.pos - lo + 1) if span * keys < 1 << 62 else None
            self._packing = (lo, hi, mine)
        return self._packing

    def _locate_ranked(self, qkeys: np.ndarray, bounds: list[np.ndarray]) -> list[np.ndarray]:
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


def pair_codes(kids: list[np.ndarray], pos: list[np.ndarray]) -> list[np.ndarray]:
    """One int64 per (key id, position) of each pair of arrays, equal where the pairs are and
    ordered as they are: key id times the positions' span, plus the position's offset in it;
    where that could overflow (positions spread past 2^62 / keys), the positions' ranks."""
    both = np.concatenate(pos)
    if not len(both):
        return [np.zeros(0, np.int64) for _ in pos]
    base, top = int(both.min()), int(both.max())
    keys = max(int(k.max(initial=0)) for k in kids) + 1
    if (top - base + 1) * keys < 1 << 62:
        width = np.int64(top - base + 1)
        return [k * width + (p - base) for k, p in zip(kids, pos, strict=True)]
    _, rank = np.unique(both, return_inverse=True)
    width = np.int64(rank.max() + 1)
    cuts = np.cumsum([len(p) for p in pos])[:-1]
    return [k * width + r for k, r in zip(kids, np.split(rank, cuts), strict=True)]


def sorted_table(t: Table) -> Table:
    """``t`` sorted by (key, position). A batch's tables are sorted runs put together (the
    entries read, then the batch's own): as one int64 per entry, a stable sort merges such
    runs in about linear time, and a table already sorted is returned as it is."""
    (code,) = pair_codes([t.kid], [t.pos])
    if (code[1:] >= code[:-1]).all():
        return t
    return t.take(np.argsort(code, kind="stable"))
