"""A source's ``preproc``, ``where``, ``since``/``until``, and the ints logged into text fields: the one
implementation the source job and the mock client both apply to incoming rows, before the
dataset's schema check."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pandas as pd

from fennel_dagster.ops.expr import evaluate
from fennel_dagster.ops.rows import base_type
from fennel_dagster.wire import spec
from fennel_dagster.wire.usercode import load

WhereFn = Callable[[pd.DataFrame], object]


def text_fields(ds: spec.DatasetSpec) -> list[str]:
    """The fields declared ``str`` (or ``Optional[str]``): an int logged into one is its text,
    as Fennel casts a logged frame to its schema (an id of 1 is "1")."""
    return [f.name for f in ds.fields if isinstance(base_type(f.dtype), spec.StringType)]


def int_as_text(value: Any) -> Any:
    """An int (not a bool) as its text; any other value as it is (the schema check judges
    it)."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def ints_as_text(df: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    """``int_as_text`` over the ``names`` columns of a logged frame."""
    out = df
    for name in names:
        if name not in df.columns:
            continue
        values = df[name].tolist()
        if any(isinstance(v, int) and not isinstance(v, bool) for v in values):
            texts = [int_as_text(v) for v in values]
            out = out.assign(**{name: pd.Series(texts, index=df.index, dtype=object)})
    return out


def preprocess(src: spec.SourceSpec, df: pd.DataFrame) -> pd.DataFrame:
    """``preproc``: each field set to a literal, an expression over the raw columns, or what
    a function of the raw rows returns; then ``sample``."""
    out = df.copy()
    for name, value in src.preproc:
        if isinstance(value, spec.Lit):
            out[name] = value.value
        elif isinstance(value, spec.UserCode):
            out[name] = pd.Series(_loaded(value)(df), index=df.index)
        else:
            out[name] = evaluate(value, out)
    if src.sample is not None:
        out = out[_sampled(src.sample, out)]
    return out


@functools.lru_cache(maxsize=256)
def _loaded(code: spec.UserCode) -> Callable[[pd.DataFrame], object]:
    fn: Callable[[pd.DataFrame], object] = load(code)
    return fn


def _sampled(sample: spec.SampleSpec, df: pd.DataFrame) -> pd.Series:
    """Rows kept by ``sample``: a stable hash of the ``using`` columns below ``rate``, so the
    same row is kept by the mock, the engine and a replay."""
    if sample.rate >= 1.0 or df.empty:
        return pd.Series(sample.rate >= 1.0, index=df.index, dtype=bool)
    cols = list(sample.using) or sorted(df.columns)
    h = pd.util.hash_pandas_object(df[cols].astype(str), index=False).to_numpy()
    return pd.Series(h < int(sample.rate * 2**64), index=df.index)


def where_function(src: spec.SourceSpec) -> WhereFn | None:
    """The loaded user function of a ``where=`` given as code (None: none, or an expression)."""
    if isinstance(src.where, spec.UserCode):
        fn: WhereFn = load(src.where)
        return fn
    return None


def where_mask(src: spec.SourceSpec, df: pd.DataFrame, fn: WhereFn | None = None) -> pd.Series:
    """Which rows ``where=`` keeps (all when there is none); ``fn`` from ``where_function``."""
    if src.where is None:
        return pd.Series([True] * len(df), index=df.index, dtype=bool)
    if isinstance(src.where, spec.UserCode):
        fn = fn or where_function(src)
        assert fn is not None
        return pd.Series(fn(df), index=df.index).astype(bool)
    return pd.Series(evaluate(src.where, df), index=df.index).fillna(False).astype(bool)


def in_time_range(src: spec.SourceSpec, ts_ns: int) -> bool:
    """Whether ``since``/``until`` keep a row stamped ``ts_ns`` (ns since the epoch, UTC):
    ``since <= ts < until``. A row outside is dropped quietly, not an error row."""
    if src.since is not None and ts_ns < earliest_ns(src.since):
        return False
    return src.until is None or ts_ns < earliest_ns(src.until)


def event_time_problem(
    src: spec.SourceSpec, dataset: str, field: str, ts_ns: int, arrived_ns: int
) -> str | None:
    """Why a row's event time (ns since the epoch, UTC) is out of the source's bounds, or
    None. Integers: this runs for every row, and the common answer needs no Timestamp.

    ``arrived_ns`` is the row's processing time: the Kafka message's timestamp in the engine
    (so a replay judges the same rows alike), the wall clock in the mock."""
    if ts_ns < earliest_ns(src.earliest):
        return (
            f"{dataset}.{field} = {_iso(ts_ns)} is before the source's earliest "
            f"({_iso(earliest_ns(src.earliest))}); pass earliest= to @source to accept older "
            "events"
        )
    ahead = (ts_ns - arrived_ns) / 1e9
    if ahead > src.max_future:
        return (
            f"{dataset}.{field} = {_iso(ts_ns)} is {_span(ahead)} ahead of its arrival "
            f"({_iso(arrived_ns)}), more than the source's max_future "
            f"({_span(src.max_future)}); a clock or unit error? raise max_future= on @source "
            "to accept it"
        )
    return None


@functools.lru_cache(maxsize=64)
def earliest_ns(text: str) -> int:
    """A source's ``earliest``, parsed once."""
    ts = pd.Timestamp(text)
    return int((ts if ts.tzinfo else ts.tz_localize("UTC")).value)


def _iso(ns: int) -> str:
    return pd.Timestamp(ns, tz="UTC").isoformat()


def _span(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:,.1f}{unit}"
    return f"{seconds:.0f}s"
