"""The maths of one aggregation: over a window's raw values (``aggregate_values``), or from a
window's exact totals (``finish``: count, sum, avg, min, max, stddev; see ``ops/tiles.py``)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from fennel_dagster.ops import tiles
from fennel_dagster.wire import spec


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


def finish(agg: spec.AggSpec, total: Any, extreme: Any, scale: int) -> list[Any]:
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
