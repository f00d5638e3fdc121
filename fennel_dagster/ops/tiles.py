"""Time tiles for continuous-window aggregation: sizes, range plans, exact partial aggregates.

A tile of size ``T`` (microseconds) is the half-open interval ``[i*T, (i+1)*T)``, aligned to
the epoch. A continuous window of duration ``d`` uses tiles of the largest power of two
seconds not above ``d/32`` (so at most ~64 whole tiles per window), and finer levels by
factors of 32 for its two ends, down to ``FINEST`` (2 s) or below; ``forever`` uses a
hierarchy of sizes, 2**36 s down to 2 s by factors of 32, so a prefix ``(-inf, t]`` is at
most 31 tiles per level plus one 2 s tile of raw events, whatever the history's length.

``plan(levels, lo, hi)`` splits each query range ``[lo, hi]`` (inclusive, microseconds) into
whole tiles per level and two raw remainders (the partial tiles at its two ends), for arrays
of queries at once.

Partial aggregates are exact, so they do not depend on arrival order or batching: counts are
integers, min/max are values, and sums (and sums of squares) are dyadic rationals ``n * 2**e``
held as Python integers, since every finite double is one. A window's float sum is the
correctly rounded value of its exact sum; an integer sum is an integer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

US = 1_000_000
FOREVER_LEVELS: tuple[int, ...] = tuple((1 << k) * US for k in (36, 31, 26, 21, 16, 11, 6, 1))
NEG_INF = -64 * FOREVER_LEVELS[0]  # "no lower bound": a multiple of every tile size
_TWO53 = float(1 << 53)


def tile_size(duration_s: int) -> int:
    """The tile size (microseconds) of a continuous window of ``duration_s`` seconds."""
    target = max(1, int(duration_s) // 32)
    return (1 << (target.bit_length() - 1)) * US


# The finest tile: raw edge events a query reads span at most this much time at each end of
# its window, so a dense key (hundreds of events a second) still reads few of them.
FINEST = 2 * US


def levels(kind: str, duration_s: int | None, legacy: bool = False) -> tuple[int, ...]:
    """Tile sizes of a window, coarse to fine (each a multiple of the next).

    Levels go finer by factors of 32 down to ``FINEST``, so the raw edge events a window
    reads are few however dense a key's stream is. ``legacy``: the levels of state written
    before (down to 64 s only), whose tiles hold no finer level."""
    if kind == "forever":
        return FOREVER_LEVELS[:-1] if legacy else FOREVER_LEVELS
    sizes = [tile_size(duration_s or 0)]
    while sizes[-1] >= 2048 * US if legacy else sizes[-1] > FINEST:
        sizes.append(sizes[-1] // 32)
    return tuple(sizes)


@dataclass
class Plan:
    """Per query: raw ranges ``[la, lb)`` and ``[ra, rb)`` (microseconds), and per level
    ``(T, l0, l1, r0, r1)``: whole tiles with index in ``[l0, l1)`` and ``[r0, r1)``."""

    la: np.ndarray
    lb: np.ndarray
    ra: np.ndarray
    rb: np.ndarray
    tiles: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]


def plan(sizes: Sequence[int], lo: np.ndarray, hi: np.ndarray) -> Plan:
    """Decompose ``[lo, hi]`` into whole tiles of ``sizes`` (coarse to fine) and raw ends.

    The range is a left piece and a right piece; each level takes the whole tiles out of
    both. After the first split the left piece ends and the right piece starts on a boundary
    of a coarser level, so the pieces stay two, and the raw remainders are each inside one
    tile of the finest level (or, when no whole tile fits, the range spans at most two)."""
    la = lo.astype(np.int64)
    lb = hi.astype(np.int64) + 1
    ra, rb = lb.copy(), lb.copy()
    out = []
    for t in sizes:
        a = -((-la) // t) * t
        b = (lb // t) * t
        whole = a < b
        l0, l1 = np.where(whole, a // t, 0), np.where(whole, b // t, 0)
        fresh = whole & (ra >= rb)
        ra, rb = np.where(fresh, b, ra), np.where(fresh, lb, rb)
        lb = np.where(whole, a, lb)
        a2 = -((-ra) // t) * t
        b2 = (rb // t) * t
        whole2 = (a2 < b2) & (a2 == ra)
        r0, r1 = np.where(whole2, a2 // t, 0), np.where(whole2, b2 // t, 0)
        ra = np.where(whole2, b2, ra)
        out.append((t, l0, l1, r0, r1))
    return Plan(la, lb, ra, rb, out)


# --------------------------------------------------------------------------- exact numbers


def exact(v: Any) -> tuple[int, int]:
    """``v`` as ``(n, e)`` with ``v == n * 2**e`` exactly (ints: ``e == 0``)."""
    if isinstance(v, int):
        return int(v), 0
    f = float(v)
    if f == 0 or f != f:
        return 0, 0
    if math.isinf(f):
        raise ValueError("sum/avg/stddev of an infinite value")
    m, e = math.frexp(f)
    return int(m * _TWO53), e - 53


def canonical(n: int, e: int) -> tuple[int, int]:
    if n == 0:
        return 0, 0
    tz = (n & -n).bit_length() - 1
    return n >> tz, e + tz


def to_float(n: int, e: int) -> float:
    """``n * 2**e`` correctly rounded (CPython's int true division rounds correctly)."""
    return float(n << e) if e >= 0 else n / (1 << -e)


def to_int(n: int, e: int) -> int:
    return n << e if e >= 0 else n >> -e


# --------------------------------------------------------------------------- tile stats
#
# A tile's value is ``{"n": rows, "v": {column: [c, fc, sn, se, qn, qe, mn, mx]}}``:
# non-null count, float count, exact sum ``sn * 2**se``, exact sum of squares
# ``qn * 2**qe`` (only when a stddev reads the column), min and max (None when empty).


def col_stats(values: Iterable[Any], squares: bool) -> list[Any]:
    c = fc = 0
    parts: list[tuple[int, int]] = []
    mn = mx = None
    for v in values:
        if v is None:
            continue
        c += 1
        if isinstance(v, float):
            fc += 1
        parts.append(exact(v))
        mn = v if mn is None or v < mn else mn
        mx = v if mx is None or v > mx else mx
    sn, se = _dyadic_sum(parts)
    qn, qe = _dyadic_sum([(n * n, 2 * e) for n, e in parts]) if squares else (0, 0)
    return [c, fc, sn, se, qn, qe, mn, mx]


def _dyadic_sum(parts: Sequence[tuple[int, int]]) -> tuple[int, int]:
    nz = [(n, e) for n, e in parts if n]
    if not nz:
        return 0, 0
    lo = min(e for _, e in nz)
    return canonical(sum(n << (e - lo) for n, e in nz), lo)


def merge_stats(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    cols: dict[str, list[Any]] = {}
    for col in sorted(set(a["v"]) | set(b["v"])):
        x, y = a["v"].get(col), b["v"].get(col)
        if x is None or y is None:
            cols[col] = list(x if y is None else y)
            continue
        s = _dyadic_sum([(x[2], x[3]), (y[2], y[3])])
        q = _dyadic_sum([(x[4], x[5]), (y[4], y[5])])
        mns = [v for v in (x[6], y[6]) if v is not None]
        mxs = [v for v in (x[7], y[7]) if v is not None]
        cols[col] = [
            x[0] + y[0], x[1] + y[1], *s, *q,
            min(mns) if mns else None, max(mxs) if mxs else None,
        ]  # fmt: skip
    return {"n": a["n"] + b["n"], "v": cols}


# --------------------------------------------------------------------------- range queries


def prefix(x: np.ndarray) -> np.ndarray:
    """``p[i] = x[:i].sum()`` (length ``len(x) + 1``), in ``x``'s dtype."""
    out = np.zeros(len(x) + 1, dtype=x.dtype)
    if len(x):
        np.cumsum(x, out=out[1:])
    return out


def range_reduce(
    ufunc: np.ufunc, x: np.ndarray, i0: np.ndarray, i1: np.ndarray, empty: Any
) -> np.ndarray:
    """``ufunc.reduce(x[i0[j]:i1[j]])`` for every j (``empty`` where the range is empty)."""
    out = np.full(len(i0), empty, dtype=x.dtype)
    ok = i1 > i0
    if not ok.any():
        return out
    padded = np.append(x, np.array([empty], dtype=x.dtype))
    idx = np.empty(2 * int(ok.sum()), dtype=np.intp)
    idx[0::2], idx[1::2] = i0[ok], i1[ok]
    out[ok] = ufunc.reduceat(padded, idx)[0::2]
    return out


def merge_grouped(
    gid: np.ndarray, a: np.ndarray, b: np.ndarray, slack: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(group, start, end)`` of the union of each group's half-open intervals ``[a[i], b[i])``,
    ordered by group, then start; with ``slack`` (per group id), two intervals of a group
    at most ``slack[group]`` apart are joined too, with the gap between them. A running
    maximum over ``group * width + value`` never crosses a group; where that could overflow,
    values are ranked first (a sort more), whatever the magnitudes."""
    keep = a < b
    gid, a, b = gid[keep], a[keep], b[keep]
    if not len(a):
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    if slack is not None:  # a run ends at its largest b + slack, less the group's slack
        g, start, end = merge_grouped(gid, a, b + slack[gid])
        return g, start, end - slack[g]
    lo, groups = int(a.min()), int(gid.max()) + 1
    span = int(b.max()) - lo + 1
    if span * groups < 1 << 62:  # group offsets fit in int64: no ranking (a sort) needed
        # one int64 key (group, then start): a single argsort, ~9x lexsort's speed on 20k
        # queries; ties (same group and start) may come in any order, the running max
        # below joins them alike
        key = gid.astype(np.int64) * span + (a - lo)
        order = np.argsort(key)
        g, a, b = gid[order].astype(np.int64), a[order], b[order]
        off = g * span
        reach = np.maximum.accumulate(off + (b - lo))
        first = np.r_[True, (g[1:] != g[:-1]) | (off[1:] + (a[1:] - lo) > reach[:-1])]
        starts = np.flatnonzero(first)
        last = np.r_[starts[1:], len(a)] - 1
        return g[starts], a[starts].astype(np.int64), reach[last] - off[last] + lo
    values, rank = np.unique(np.concatenate([a, b]), return_inverse=True)
    width = np.int64(len(values))
    ra, rb = rank[: len(a)], rank[len(a) :]
    order = np.lexsort((ra, gid))
    g, ra, rb, a = gid[order], ra[order], rb[order], a[order]
    reach = np.maximum.accumulate(g.astype(np.int64) * width + rb)
    first = np.r_[True, (g[1:] != g[:-1]) | (g[1:] * width + ra[1:] > reach[:-1])]
    starts = np.flatnonzero(first)
    last = np.r_[starts[1:], len(a)] - 1
    # a run ends at its largest b, whose rank the running maximum carries
    ends = values[reach[last] - g[last] * width].astype(np.int64)
    return g[starts].astype(np.int64), a[starts].astype(np.int64), ends
