"""Answering a point-in-time lookup of a dataset from the state that serves it.

One implementation for every reader: the mock client calls it on its in-memory state, the
engine's lookup endpoint on a RocksDB follower of the serving job partition. Which state
serves a dataset is the compiler's decision (``AggregateServing`` of a terminal continuous
aggregate, else the dataset's index); this module only reads it.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from fennel_dagster.errors import QueryError
from fennel_dagster.ops import aggregate, index
from fennel_dagster.ops.expr import astype
from fennel_dagster.ops.rows import to_records
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
    _check_keys(ds, list(keys.columns))
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


def lookup_state_records(
    state: StateReader,
    ds: spec.DatasetSpec,
    serves: plan.AggregateServing | None,
    keys: list[dict[str, Any]],
    stamps_us: list[int],
    fields: list[str] | None = None,
) -> tuple[list[dict[str, Any]], list[bool]]:
    """``lookup_state`` answered as JSON records (``to_records`` of its rows), for keys given
    as JSON records of the dataset's key types: what an engine's lookup endpoint sends back.

    An index lookup reads the stored rows (already JSON of the dataset's types) without
    building a DataFrame; an aggregate's values are assembled by ``lookup_state`` itself."""
    _check_keys(ds, list(ds.keys))  # a dataset without keys
    for i, rec in enumerate(keys):  # every record, not the first: a KeyError is no answer
        missing = [k for k in ds.keys if k not in rec]
        if missing:
            raise LookupFailed(
                f"lookup of {ds.name} needs its key field(s) {', '.join(ds.keys)}; key record "
                f"{i} ({_brief(rec)}) is missing {', '.join(missing)}"
            )
    if serves is not None:
        ts = pd.Series(pd.to_datetime(stamps_us, unit="us", utc=True))
        key_frame = pd.DataFrame({k: [r[k] for r in keys] for k in ds.keys})
        rows, found = lookup_state(state, ds, serves, key_frame, ts, fields)
        return to_records(rows), [bool(f) for f in found]
    recs, hits = index.lookup_records(state, ds, keys, stamps_us)
    wanted = [f.name for f in ds.fields if fields is None or f.name in fields]
    out = []
    for asked, rec, hit in zip(keys, recs, hits, strict=True):
        row = {n: rec.get(n) for n in wanted} if hit else dict.fromkeys(wanted)
        for k in ds.keys:  # the keys asked for, found or not (as Fennel answers)
            if k in row:
                row[k] = asked[k]
        out.append(row)
    return out, hits


def _brief(rec: dict[str, Any]) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in rec.items())
    return text if len(text) <= 80 else text[:77] + "..."


def _check_keys(ds: spec.DatasetSpec, given: list[str]) -> None:
    if not ds.keys:
        raise LookupFailed(
            f"dataset {ds.name} has no key fields, so it cannot be looked up; "
            "declare its key with field(key=True)"
        )
    missing = [k for k in ds.keys if k not in given]
    if missing:
        raise LookupFailed(
            f"lookup of {ds.name} needs its key field(s) {', '.join(ds.keys)}; "
            f"the keys frame is missing {', '.join(missing)}"
        )


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
