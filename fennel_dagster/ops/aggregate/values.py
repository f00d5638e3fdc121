"""The maths of one aggregation: over a window's raw values (``aggregate_values``), or from a
window's exact totals (``finish``: count, sum, avg, min, max, stddev; see ``ops/tiles.py``)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from fennel_dagster.ops import tiles
from fennel_dagster.wire import spec

# one aggregation's values over a batch of queries: Python values, or a typed array of them
Values = list[Any] | np.ndarray


def aggregate_values(
    agg: spec.AggSpec, values: Sequence[Any], stamps: Sequence[int], at: int | None = None
) -> Any:
    """One aggregation over one window's events (``values`` in event-time order, ``stamps``
    their event times in microseconds); ``at``: the time (us) the window is read at, which
    an exponential decay measures ages from."""
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
            if not present:
                return agg.default
            if agg.decimal_scale is not None and all(v == v for v in present):
                # the mean of the decimals, then a float (a NaN: np.mean's NaN below)
                q = 10**agg.decimal_scale
                return float(
                    Fraction(sum(round(Fraction(v) * q) for v in present), q * len(present))
                )
            return float(np.mean(present))
        case "min":
            return min(present) if present else agg.default
        case "max":
            return max(present) if present else agg.default
        case "stddev":
            return float(np.std(present)) if present else agg.default
        case "quantile":
            if not present:
                return agg.default
            # Fennel's rule: the element at rank floor(p * n) of the sorted values (so the
            # median of [10, 20] is 20), never an interpolation between two
            ordered = sorted(present)
            return float(ordered[min(len(ordered) - 1, math.floor((agg.p or 0.0) * len(ordered)))])
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
        case "exp_decay":
            return exp_decay_sum(vals, stamps, at, agg.half_life)
    raise ValueError(f"unknown aggregation {agg.kind!r}")


# Fennel reads the decayed weight of a key's positive values, and of its negative values, as 0
# once it has fallen under e**-25 (~1.4e-11): a key idle for many half-lives reads 0.0 on
# Fennel's server and mock alike, never a vanishing residue (such as 5 * 2**-1070)
DECAYED_TO_ZERO = math.exp(-25.0)


def exp_decay_sum(
    values: Sequence[Any], stamps: Sequence[int], at: int | None, half_life: int | None
) -> float:
    """``sum(v * 0.5 ** ((at - t) / half_life))`` over the non-null values, ages in exact
    microseconds; ``math.fsum`` makes it the correctly rounded sum of the terms, so the same
    events give the same float whatever their order or batching. The positive terms, and the
    negative terms, count as 0 when their sum is under ``DECAYED_TO_ZERO`` in magnitude
    (Fennel's rule). 0.0 over no values."""
    if at is None or not half_life:
        raise ValueError("exp_decay needs the time it is read at and a positive half_life")
    scale = float(half_life * 1_000_000)
    terms = [
        float(v) * math.exp2(-(at - t) / scale)
        for v, t in zip(values, stamps, strict=True)
        if v is not None
    ]
    positive = [x for x in terms if x > 0]
    negative = [x for x in terms if x < 0]
    kept = (positive if math.fsum(positive) >= DECAYED_TO_ZERO else []) + (
        negative if -math.fsum(negative) >= DECAYED_TO_ZERO else []
    )
    return math.fsum(kept)


def finish(agg: spec.AggSpec, total: Any, extreme: Any, scale: int) -> Values:
    """The aggregation's values from its window's totals (see ``tiles`` for exactness): a
    typed array where every value is of one type (counts; sums all of ints or all of
    floats), which equals the list of Python values element by element."""
    col = agg.of
    if agg.kind == "count":
        n = total(col, "c") if col and agg.dropnull else total(None, "")
        return np.asarray(n).astype(np.int64)
    assert col is not None
    if agg.kind == "sum":
        typed = _typed_sum(total(col, "c"), total(col, "fc"), total(col, "s"), scale)
        if typed is not None:
            return typed
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
        if agg.decimal_scale is not None:
            return [
                agg.default if k == 0 else _decimal_mean(x, scale, k, agg.decimal_scale)
                for k, x in zip(c, s, strict=True)
            ]
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


_EXACT = 2**53  # an int64 of at most this magnitude is a float64 exactly


def _typed_sum(c: np.ndarray, fc: np.ndarray, s: np.ndarray, scale: int) -> np.ndarray | None:
    """``finish``'s sums as one array, when each is of one type: all of ints (scale 0), or
    all of floats over at least one value each, whose exact totals ``s * 2**scale`` a
    float64 holds before the scaling (so ``ldexp`` rounds the exact value once, as
    ``tiles.to_float`` does). None: the values go one by one."""
    if s.dtype != np.int64 or not len(s):
        return None
    if scale == 0 and not fc.any():
        return np.where(c > 0, s, 0)
    if not ((c > 0) & (fc > 0)).all() or not ((s >= -_EXACT) & (s <= _EXACT)).all():
        return None
    with np.errstate(over="ignore"):  # an infinity sends the sums one by one (to raise)
        out = np.ldexp(s.astype(np.float64), scale)
    return out if np.isfinite(out).all() else None


def _decimal_mean(x: int, e: int, k: int, digits: int) -> float:
    """The mean of ``k`` decimals of ``digits`` places whose float values sum exactly to
    ``x * 2**e``: that sum rounded to ``digits`` places (the decimals' sum, each float being
    the nearest to its decimal), divided by ``k``, correctly rounded to a float."""
    q = 10**digits
    total = round(Fraction(x) * Fraction(2) ** e * q)
    return float(Fraction(total, q * k))


def _ratio(n: int, e: int, d: int) -> float:
    """``n * 2**e / d`` correctly rounded."""
    return (n << e) / d if e >= 0 else n / (d << -e)
