"""Answering a point-in-time lookup of a dataset from the state that serves it.

One implementation for every reader: the mock client calls it on its in-memory state, the
engine's lookup endpoint on a RocksDB follower of the serving job partition. Which state
serves a dataset is the compiler's decision (``AggregateServing`` of a terminal continuous
aggregate, else the dataset's index); this module only reads it.
"""

from __future__ import annotations

import pandas as pd

from fennel_dagster.errors import QueryError
from fennel_dagster.ops import aggregate, index
from fennel_dagster.ops.expr import astype
from fennel_dagster.ops.state import StateReader
from fennel_dagster.wire import plan, spec


class LookupFailed(QueryError, LookupError):
    """A lookup that cannot be served: names the dataset and what to do."""


def lookup_state(
    state: StateReader,
    ds: spec.DatasetSpec,
    serves: plan.AggregateServing | None,
    keys: pd.DataFrame,
    ts: pd.Series,
    fields: list[str] | None = None,
) -> tuple[pd.DataFrame, pd.Series]:
    """(rows of ``ds`` as of each timestamp, was the key found) for each row of ``keys``."""
    if not ds.keys:
        raise LookupFailed(
            f"dataset {ds.name} has no key fields, so it cannot be looked up; "
            "declare its key with field(key=True)"
        )
    missing = [k for k in ds.keys if k not in keys.columns]
    if missing:
        raise LookupFailed(
            f"lookup of {ds.name} needs its key field(s) {', '.join(ds.keys)}; "
            f"the keys frame is missing {', '.join(missing)}"
        )
    keys = keys[list(ds.keys)].reset_index(drop=True)
    ts = pd.to_datetime(pd.Series(ts), utc=True).reset_index(drop=True)
    types = {f.name: f.dtype for f in ds.fields}
    if serves is None:
        rows, found = index.lookup(state, ds, keys, ts, fields)
        for k in ds.keys:  # the keys asked for, found or not (as Fennel answers)
            if k in rows.columns:
                rows[k] = astype(keys[k], types[k]).to_numpy()
        return _not_found_as_null(rows, found, ds, types), found
    values, found = aggregate.lookup_aggregate(state, serves.scope, serves.node, keys, ts)
    out = keys.copy()
    for c in values.columns:
        out[c] = values[c]
    out[ds.timestamp] = ts.to_numpy()
    wanted = [f.name for f in ds.fields if fields is None or f.name in fields]
    return _not_found_as_null(out[wanted], found, ds, types), found


def _not_found_as_null(
    rows: pd.DataFrame, found: pd.Series, ds: spec.DatasetSpec, types: dict[str, spec.DType]
) -> pd.DataFrame:
    """A key without a row at the time has null values (``pd.NA``), never an empty aggregate
    (a Count of 0) or a NaN; each column typed as the dataset declares it (a Min of ints is an
    int), so callers compare with ``pd.NA`` and apply defaults as Fennel's do."""
    rows = rows.copy()
    missing = ~found.to_numpy(dtype=bool)
    absent = bool(missing.any())  # the common case, all found, only casts
    for c in rows.columns:
        if c in ds.keys or c == ds.timestamp:
            continue
        col = rows[c].astype(object).where(~missing, None) if absent else rows[c]
        rows[c] = astype(col, types[c]) if c in types else col
    return rows
