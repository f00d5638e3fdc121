"""Answering a point-in-time lookup of a dataset from the state that serves it.

One implementation for every reader: the mock client calls it on its in-memory state, the
engine's lookup endpoint on a RocksDB follower of the serving job partition. Which state
serves a dataset is the compiler's decision (``AggregateServing`` of a terminal continuous
aggregate, else the dataset's index); this module only reads it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pandas as pd

from fennel_dagster.errors import QueryError
from fennel_dagster.ops import aggregate, index
from fennel_dagster.ops.aggregate import temporal
from fennel_dagster.ops.expr import astype
from fennel_dagster.ops.rows import to_records, typed_series
from fennel_dagster.ops.state import StateReader
from fennel_dagster.wire import plan, spec


class LookupFailed(QueryError, LookupError):
    """A lookup that cannot be served: names the dataset and what to do."""


class DatasetNotFound(LookupFailed, ValueError):
    """A request names a dataset the branch has not committed (Fennel's mock raises a
    ``ValueError`` with these words)."""


def dataset_not_found(name: str, committed: list[str] | None = None) -> DatasetNotFound:
    known = (
        f" (committed: {', '.join(sorted(committed)) or 'none'})" if committed is not None else ""
    )
    return DatasetNotFound(
        f"Dataset `{name}` not found",
        hint=f"dataset {name} is not committed on this branch{known}: commit it first",
    )


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
    keys = as_key_types(keys, types)
    if serves is None:
        rows, found = index.lookup(state, ds, keys, ts, fields)
        for k in ds.keys:  # the keys asked for, found or not (as Fennel answers)
            if k in rows.columns:
                rows[k] = astype(keys[k], types[k]).to_numpy()
        return _not_found_as_null(rows, found, ds, types), found
    times = temporal.kinds(serves.node, types, keys.iloc[0:0])
    node = temporal.numbered(serves.node, times)
    values, found, changed = aggregate.lookup_aggregate(state, serves.scope, node, keys, ts)
    values = temporal.answered(values, times)
    out = keys.copy()
    for c in values.columns:
        out[c] = values[c]
    # when each row took its value (NaT: not found), as Fennel answers an aggregate's time
    out[ds.timestamp] = _times_us(changed)
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
        plain = _plain_aggregate_records(state, ds, serves, keys, stamps_us, fields)
        if plain is not None:
            return plain
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


# pandas' datetime64[ns] range, in µs: times outside it take the frame road (which refuses them)
_FIRST_US, _LAST_US = -9_223_372_036_854_775, 9_223_372_036_854_775
_INT64 = (-(2**63), 2**63 - 1)


def _plain_aggregate_records(
    state: StateReader,
    ds: spec.DatasetSpec,
    serves: plan.AggregateServing,
    keys: list[dict[str, Any]],
    stamps_us: list[int],
    fields: list[str] | None,
) -> tuple[list[dict[str, Any]], list[bool]] | None:
    """``lookup_state_records`` of an aggregate whose keys are ints or strings and whose
    values are ints, floats, bools, strings or nulls, without a DataFrame: a lookup endpoint
    answers a key or a few, and frames cost ten times the reads there. Each value is typed as
    the frame road's cast and JSON give it (``test_lookup_records`` holds them equal); None
    for any other shape, which the frame road answers."""
    if not all(_FIRST_US <= t <= _LAST_US for t in stamps_us):
        return None
    node = serves.node
    if not all(_plain_key(r[k]) for r in keys for k in ds.keys):
        return None
    queries = [tuple(r[k] for k in node.keys) for r in keys]
    asked = [{k: r[k] for k in ds.keys} for r in keys]
    wanted = [f for f in ds.fields if fields is None or f.name in fields]
    aggs = {a.into for a in node.aggs}
    if not all(_plain_type(f.dtype) for f in wanted if f.name in aggs):
        return None  # decided before reading: the frame road would read it all again
    values, found, changed = aggregate.aggregate_at(state, serves.scope, node, queries, stamps_us)
    fills = aggregate_defaults(ds) if not all(found) else {}
    columns: dict[str, list[Any]] = {}
    for f in wanted:
        if f.name in values:
            vals, hit = values[f.name], found
            if f.name in fills:  # a key without a row answers the aggregation's default
                vals = [v if h else fills[f.name] for v, h in zip(vals, found, strict=True)]
                hit = [True] * len(found)
            typed = _typed(vals, f.dtype, hit)
            if typed is None:
                return None
            columns[f.name] = typed
    out = []
    for i, (key, t) in enumerate(zip(asked, changed, strict=True)):
        row: dict[str, Any] = {}
        for f in wanted:
            name = f.name
            if name in key:
                row[name] = key[name]
            elif name == ds.timestamp:
                row[name] = None if t is None else _iso_us(t)
            else:
                row[name] = columns[name][i]
        out.append(row)
    return out, found


def _plain_key(v: Any) -> bool:
    """A key value the frame road would give back as it is (and hash as it is)."""
    return type(v) is str or (type(v) is int and _INT64[0] <= v <= _INT64[1])


_PLAIN = (spec.IntType, spec.FloatType, spec.BoolType, spec.StringType, spec.RegexType,
          spec.BetweenType, spec.OneOfType)  # fmt: skip


def _plain_type(dtype: spec.DType) -> bool:
    """A field ``_typed`` can type (lists, maps, dates and the like cannot)."""
    while isinstance(dtype, spec.OptionalType):
        dtype = dtype.of
    return isinstance(dtype, _PLAIN)


def _typed(values: list[Any], dtype: spec.DType, found: list[bool]) -> list[Any] | None:
    """The JSON value of each aggregate value as ``astype(dtype)`` then ``json_column`` give
    it, a key not found as null; None when one of them is of a type this does not type."""
    base = dtype
    while isinstance(base, spec.OptionalType):
        base = base.of
    integral = isinstance(base, spec.IntType) or (
        isinstance(base, spec.BetweenType | spec.OneOfType) and isinstance(base.of, spec.IntType)
    )  # the cases of ``astype``, in its order
    out: list[Any] = []
    for v, hit in zip(values, found, strict=True):
        if not hit or v is None:
            out.append(None)
            continue
        if isinstance(v, np.generic):
            v = v.item()
        kind = type(v)
        if integral:
            if kind is not int or not _INT64[0] <= v <= _INT64[1]:
                return None
            out.append(v)
            continue
        match base:
            case spec.FloatType() | spec.BetweenType() if kind is float:
                out.append(None if v != v else v)
            case spec.FloatType() | spec.BetweenType() if (
                kind is int and _INT64[0] <= v <= _INT64[1]
            ):
                out.append(float(v))
            case spec.BoolType() if kind is bool:
                out.append(v)
            case spec.StringType() | spec.RegexType() | spec.OneOfType() if kind is str:
                out.append(v)
            case _:
                return None
    return out


def _iso_us(t: int) -> str:
    """A time in µs as ``json_column`` writes a UTC timestamp."""
    return (_EPOCH + dt.timedelta(microseconds=t)).isoformat()


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


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
    fills = aggregate_defaults(ds) if absent else {}
    for c in rows.columns:
        if c in ds.keys or c == ds.timestamp:
            continue
        col = rows[c].astype(object).where(~missing, fills.get(c)) if absent else rows[c]
        rows[c] = astype(col, types[c]) if c in types else col
    return rows


def _times_us(stamps: list[int | None]) -> np.ndarray:
    """Times in µs (None: NaT) as a UTC datetime column."""
    known = np.array([0 if t is None else t for t in stamps], dtype=np.int64)
    times = pd.Series(pd.to_datetime(known, unit="us", utc=True)).astype("datetime64[ns, UTC]")
    return times.where(pd.Series([t is not None for t in stamps]), pd.NaT).to_numpy()


def not_found_as_null(rows: pd.DataFrame, found: pd.Series, ds: spec.DatasetSpec) -> pd.DataFrame:
    """``rows`` of a lookup of ``ds`` with the values of each key not ``found`` null, as a
    lookup answers a key it has no row for (the mock's erased keys)."""
    return _not_found_as_null(rows, found, ds, {f.name: f.dtype for f in ds.fields})


def as_key_types(keys: pd.DataFrame, types: dict[str, spec.DType]) -> pd.DataFrame:
    """Key columns cast to their fields' types, as Fennel's lookups cast them (an int 1 asked
    of a str key is "1"); a column that does not cast is asked as it is (found nowhere)."""
    out = keys.copy()
    for k in keys.columns:
        try:
            out[k] = astype(keys[k], types[k]).to_numpy()
        except (TypeError, ValueError, OverflowError):
            continue
    return out


# the aggregations whose default a key with no row answers, as Fennel's lookups do
_FILLED = frozenset({"avg", "min", "max", "quantile", "stddev"})


def aggregate_defaults(ds: spec.DatasetSpec) -> dict[str, Any]:
    """The value a lookup answers for a key without a row, per field of an aggregate dataset
    (its first pipeline's last node): the default of each Average, Min, Max, Quantile and
    Stddev that has one, as Fennel's lookups answer them; Count, Sum and the rest stay null."""
    types = {f.name: f.dtype for f in ds.fields}
    for p in ds.pipelines[:1]:
        node = next((n for n in p.nodes if n.id == p.output), None)
        if isinstance(node, spec.AggregateNode):
            return {  # typed as the field (a Min of dates' default travels as its text)
                a.into: typed_series([a.default], types[a.into]).tolist()[0]
                if a.into in types else a.default
                for a in node.aggs if a.kind in _FILLED and a.default is not None
            }  # fmt: skip
    return {}
