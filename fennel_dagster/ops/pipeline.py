"""Runs a pipeline's operator DAG on one batch of one input: the engine's and the mock's code.

``PipelineExecutor.run(input_dataset, batch, state)`` returns the output rows and the state
mutations (a ``WriteBatch``) of every stateful operator; nothing is written to ``state``.
Row-level failures of user code are collected as ``RowError``s, never raised, so one bad row
cannot stop a stream.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from fennel_dagster.declare.dtypes import render
from fennel_dagster.errors import ExecutionError
from fennel_dagster.ops import aggregate, index
from fennel_dagster.ops.aggregate import temporal
from fennel_dagster.ops.columns import decimals_as_floats
from fennel_dagster.ops.expr import astype, evaluate
from fennel_dagster.ops.keys import key_prefix, micros
from fennel_dagster.ops.rows import (
    content_seq,
    dumps,
    json_value,
    loads,
    to_records,
)
from fennel_dagster.ops.schema import misfits, widened
from fennel_dagster.ops.state import OverlayReader, StateReader, WriteBatch
from fennel_dagster.wire import spec
from fennel_dagster.wire.usercode import load

# aggregations that read their column as numbers (a Decimal column: as floats)
_NUMERIC = frozenset({"sum", "avg", "stddev", "quantile", "min", "max", "exp_decay"})


@dataclass
class RowError:
    dataset: str
    operator: str
    reason: str
    row: dict[str, Any]


@dataclass
class BatchResult:
    rows: pd.DataFrame
    writes: WriteBatch
    errors: list[RowError] = field(default_factory=list)
    late: int = 0


class PipelineError(ExecutionError, RuntimeError):
    """A pipeline that cannot run a batch at all (not a bad row: a bad declaration)."""


class PipelineExecutor:
    def __init__(
        self, pipeline: spec.PipelineSpec, datasets: Mapping[str, spec.DatasetSpec]
    ) -> None:
        self.p = pipeline
        self.datasets = datasets
        self.scope = f"{pipeline.dataset}.{pipeline.name}"
        self._code: dict[int, Callable[..., Any]] = {}
        out = datasets.get(pipeline.dataset)
        # the declared types of the output's fields (a Min/Max of dates answers dates)
        self._output_types = {f.name: f.dtype for f in out.fields} if out is not None else {}

    def _fn(self, code: spec.UserCode) -> Callable[..., Any]:
        key = id(code)
        if key not in self._code:
            self._code[key] = load(code)
        return self._code[key]

    def _where(self, node: spec.Node) -> str:
        return f"{self.scope} ({type(node).__name__.removesuffix('Node').lower()} {node.id})"

    def run(
        self,
        input_dataset: str | None,
        batch: pd.DataFrame,
        state: StateReader,
        start_at: str | None = None,
        stop_at: str | None = None,
    ) -> BatchResult:
        """Run the DAG on ``batch`` rows of ``input_dataset``.

        The engine splits a pipeline at its first stateful operator (rows are repartitioned
        by that operator's keys in between): ``stop_at`` returns the frame of that node
        instead of the output; ``start_at`` seeds that node's frame with ``batch`` and runs
        only what comes after it.
        """
        wb = WriteBatch()
        res = BatchResult(pd.DataFrame(), wb)
        frames: dict[str, pd.DataFrame | None] = {}
        ts_of: dict[str, str] = {}
        seeding = start_at is not None
        for node in self.p.nodes:
            if stop_at is not None and stop_at in frames:
                break
            if seeding:
                ts_of[node.id] = self._ts_column(node, ts_of)
                frames[node.id] = batch.reset_index(drop=True) if node.id == start_at else None
                seeding = node.id != start_at
                continue
            if isinstance(node, spec.InputNode):
                ds = self.datasets[node.dataset]
                ts_of[node.id] = ds.timestamp
                frames[node.id] = (
                    batch.reset_index(drop=True) if node.dataset == input_dataset else None
                )
                continue
            if isinstance(node, spec.UnionNode):
                parts = [frames[i] for i in node.inputs if frames[i] is not None]
                ts_of[node.id] = ts_of[node.inputs[0]]
                frames[node.id] = pd.concat(parts, ignore_index=True) if parts else None
                continue
            src = frames[node.input]
            ts_col = ts_of[node.input]
            ts_of[node.id] = _renamed(node, ts_col)
            if src is None:
                frames[node.id] = None
                continue
            frames[node.id] = self.apply_node(
                node, src.reset_index(drop=True), ts_col, state, wb, res
            )
        out = frames[stop_at or self.p.output]
        res.rows = out if out is not None else pd.DataFrame()
        return res

    def _ts_column(self, node: spec.Node, ts_of: dict[str, str]) -> str:
        if isinstance(node, spec.InputNode):
            return self.datasets[node.dataset].timestamp
        if isinstance(node, spec.UnionNode):
            return ts_of[node.inputs[0]]
        return _renamed(node, ts_of[node.input])  # type: ignore[attr-defined]

    def apply_node(
        self,
        node: spec.Node,
        df: pd.DataFrame,
        ts: str,
        state: StateReader,
        wb: WriteBatch,
        res: BatchResult,
    ) -> pd.DataFrame:
        """One operator on a batch (``ts``: its timestamp column); the Spark executor runs
        the operators that carry user code through this too."""
        match node:
            case spec.FilterNode(predicate=pred, code=code):
                if pred is not None:
                    keep = evaluate(pred, df).astype("boolean").fillna(False).astype(bool)
                else:
                    raw = self._user_rows(node, df, code, res, lambda out: out)
                    keep = self._boolean_mask(node, df, raw, res)
                return df[keep.to_numpy()].reset_index(drop=True)
            case spec.AssignNode(columns=columns):
                out = df.copy()
                for c in columns:
                    if c.expr is not None:
                        out[c.name] = astype(evaluate(c.expr, out), c.dtype).to_numpy()
                    else:
                        fn = self._fn(c.code)  # type: ignore[arg-type]
                        try:
                            values = pd.Series(fn(out)).reset_index(drop=True)
                        except Exception as e:  # noqa: BLE001 - user code
                            bad = self._bad_rows(node, out, e, res)
                            out = out[~bad].reset_index(drop=True)
                            values = (
                                pd.Series(fn(out)).reset_index(drop=True)
                                if len(out)
                                else pd.Series(dtype=object)
                            )
                        out, values = self._fitting(node, c, out, values, res)
                        out[c.name] = astype(values, c.dtype) if len(out) else values
                return out
            case spec.TransformNode(code=code, schema=schema):
                fn = self._fn(code)
                try:
                    out = fn(df)
                except Exception as e:  # noqa: BLE001
                    self._bad_rows(node, df, e, res)
                    return pd.DataFrame(columns=[f.name for f in schema])
                return self._declared(node, schema, df, out, res)
            case spec.JoinNode():
                return self._join(node, df, ts, state)
            case spec.AggregateNode():
                if node.along:  # windows and as-of times follow `along`, kept under `ts`
                    df = df.assign(**{ts: pd.to_datetime(df[node.along], utc=True)})
                df = decimals_as_floats(
                    df, {a.of for a in node.aggs if a.of and a.kind in _NUMERIC}
                )
                times = temporal.kinds(node, self._output_types, df)
                node, df = temporal.as_numbers(node, df, times)
                if aggregate.is_continuous(node):
                    rows = aggregate.run_continuous(node, self.scope, df, ts, state, wb)
                else:
                    rows, late = aggregate.run_windowed(node, self.scope, df, ts, state, wb)
                    res.late += late
                return temporal.answered(rows, times)
            case spec.FirstNode(keys=keys) | spec.LatestNode(keys=keys):
                return self._first_latest(node, keys, df, ts, state, wb)
            case spec.DedupNode():
                return self._dedup(node, df, ts, state, wb)
            case spec.ExplodeNode(columns=cols):
                return df.explode(list(cols), ignore_index=True)
            case spec.DropNode(columns=cols):
                return df.drop(columns=list(cols))
            case spec.DropNullNode(columns=cols):
                subset = list(cols) or [c for c in df.columns if df[c].isna().any()]
                return df.dropna(subset=subset).reset_index(drop=True) if subset else df
            case spec.SelectNode(columns=cols):
                keep = list(dict.fromkeys([*cols, ts]))
                return df[keep]
            case spec.RenameNode(mapping=mapping):
                return df.rename(columns=dict(mapping))
            case spec.ChangelogNode(delete_column=col):
                return self._changelog(node, col, df, ts, state, wb)
        raise PipelineError(f"{self._where(node)}: operator not supported by the executor")

    def _user_rows(
        self,
        node: spec.Node,
        df: pd.DataFrame,
        code: spec.UserCode | None,
        res: BatchResult,
        post: Callable[[pd.Series], pd.Series],
    ) -> pd.Series:
        fn = self._fn(code)  # type: ignore[arg-type]
        try:
            return post(pd.Series(fn(df)).reset_index(drop=True))
        except Exception as e:  # noqa: BLE001 - user code: find the bad rows one by one
            bad = self._bad_rows(node, df, e, res)
            good = df[~bad].reset_index(drop=True)
            out = pd.Series(False, index=df.index)
            if len(good):
                out[~bad] = post(pd.Series(fn(good))).to_numpy()
            return out

    def _boolean_mask(
        self, node: spec.Node, df: pd.DataFrame, raw: pd.Series, res: BatchResult
    ) -> pd.Series:
        """A filter function's output as a mask: bools keep or drop (null drops); any other
        value is an error row, never truthiness (``"London"`` is not True)."""
        if pd.api.types.is_bool_dtype(raw.dtype):
            return raw.astype("boolean").fillna(False).astype(bool).reset_index(drop=True)
        keep = []
        for i, v in enumerate(raw.tolist()):
            if isinstance(v, bool | np.bool_) or v is None or v is pd.NA:
                keep.append(bool(v) if v is not None and v is not pd.NA else False)
                continue
            keep.append(False)
            self._error_row(
                node, res, df.iloc[i],
                f"the filter function returned {v!r} ({type(v).__name__}), not a bool: "
                "return a boolean Series, e.g. df['city'] == 'London'",
            )  # fmt: skip
        return pd.Series(keep, dtype=bool)

    def _declared(
        self,
        node: spec.Node,
        schema: tuple[spec.FieldSpec, ...],
        df: pd.DataFrame,
        out: Any,
        res: BatchResult,
    ) -> pd.DataFrame:
        """A transform's output as its schema declares it: a missing column, or a value its
        declared type cannot hold, makes an error row, never a silent cast."""
        names = [f.name for f in schema]
        if not isinstance(out, pd.DataFrame) or [n for n in names if n not in out.columns]:
            got = list(map(str, out.columns)) if isinstance(out, pd.DataFrame) else type(out)
            for i in range(len(df)):  # the input rows, so none is lost
                self._error_row(
                    node, res, df.iloc[i],
                    f"the transform returned {got}, but its schema declares {names}: return "
                    "a DataFrame with every declared column",
                )  # fmt: skip
            return pd.DataFrame(columns=names)
        out = out[names].reset_index(drop=True)
        for f in schema:
            column = widened(out[f.name], f.dtype)
            if column is not out[f.name]:
                out[f.name] = column
        bad: dict[int, str] = {}
        for f in schema:
            for i, why in misfits(out[f.name], f.dtype).items():
                bad.setdefault(i, f"{f.name!r} (declared {render(f.dtype)}): the transform "
                                  f"returned {why}")  # fmt: skip
        if not bad:
            return out
        for i, why in sorted(bad.items()):
            self._error_row(node, res, out.iloc[i], why)
        return out[_kept(len(out), bad)].reset_index(drop=True)

    def _fitting(
        self,
        node: spec.Node,
        c: spec.AssignColumn,
        df: pd.DataFrame,
        values: pd.Series,
        res: BatchResult,
    ) -> tuple[pd.DataFrame, pd.Series]:
        """The rows whose assigned value fits the column's declared type; each other row is
        an error row saying what the function returned."""
        values = widened(values, c.dtype)
        bad = misfits(values, c.dtype) if len(values) == len(df) else {}
        if not bad:
            return df, values
        for i, why in bad.items():
            self._error_row(node, res, df.iloc[i],
                            f"assign {c.name!r} (declared {render(c.dtype)}): the function "
                            f"returned {why}")  # fmt: skip
        keep = _kept(len(df), bad)
        return df[keep].reset_index(drop=True), values[keep].reset_index(drop=True)

    def _error_row(self, node: spec.Node, res: BatchResult, row: pd.Series, reason: str) -> None:
        """One input row to the dataset's error rows, with where and why."""
        res.errors.append(RowError(self.p.dataset, self._where(node), reason,
                                   {k: json_value(v) for k, v in row.items()}))  # fmt: skip

    def _bad_rows(
        self, node: spec.Node, df: pd.DataFrame, first: Exception, res: BatchResult
    ) -> pd.Series:
        """Re-run user code row by row to isolate the rows that raise; report each."""
        fn = None
        for n in (node,):
            code = getattr(n, "code", None) or next(
                (c.code for c in getattr(n, "columns", ()) if c.code), None
            )
            fn = self._fn(code) if code else None
        bad = pd.Series(False, index=df.index)
        for i in range(len(df)):
            row = df.iloc[[i]]
            try:
                if fn is not None:
                    fn(row.reset_index(drop=True))
            except Exception as e:  # noqa: BLE001
                bad.iloc[i] = True
                self._error_row(node, res, row.iloc[0], f"{type(e).__name__}: {e}")
        return bad

    def _join(
        self, node: spec.JoinNode, df: pd.DataFrame, ts: str, state: StateReader
    ) -> pd.DataFrame:
        right = self.datasets[node.right]
        keys = pd.DataFrame(
            {rc: df[lc].to_numpy() for lc, rc in zip(node.left_on, node.right_on, strict=True)}
        )
        wanted = list(node.fields) or [
            f.name for f in right.fields if not f.key and not f.timestamp
        ]
        # within=(before, after): the version as of t + after, absent if older than t - before
        shift, span = index.join_reach(node.within_before, node.within_after)
        at = pd.to_datetime(df[ts], utc=True) + pd.Timedelta(seconds=shift) if shift else df[ts]
        found_df, found = index.lookup(state, right, keys, at, wanted, span)
        out = df.copy()
        for c in wanted:  # as the right's type (an int column with misses stays Int64)
            out[c] = found_df[c].array
        if node.how == "inner":
            out = out[found.to_numpy()].reset_index(drop=True)
        return out

    def keys_of(self, node_id: str) -> tuple[str, ...]:
        """The key columns of a node's output (walking back to a keyed input or operator)."""
        node = {n.id: n for n in self.p.nodes}[node_id]
        match node:
            case spec.InputNode(dataset=name):
                return tuple(self.datasets[name].keys)
            case spec.AggregateNode(keys=keys) | spec.FirstNode(keys=keys):
                return tuple(keys)
            case spec.LatestNode(keys=keys):
                return tuple(keys)
            case spec.RenameNode(mapping=mapping):
                m = dict(mapping)
                return tuple(m.get(k, k) for k in self.keys_of(node.input))
            case spec.UnionNode(inputs=inputs):
                return self.keys_of(inputs[0])
            case spec.ChangelogNode():
                return ()
        return self.keys_of(node.input)  # type: ignore[union-attr]

    def _changelog(
        self,
        node: spec.ChangelogNode,
        col: str,
        df: pd.DataFrame,
        ts: str,
        state: StateReader,
        wb: WriteBatch,
    ) -> pd.DataFrame:
        """Upserts -> an append stream: per new version of a key, the retraction of its previous
        version (``col`` True, the old values, at the new row's time) then the new row (``col``
        False); a delete (``index.DELETED`` set) emits only the retraction.

        State ``changelog:<scope>:<node>``: per key its latest version (time, content sequence,
        row, or a tombstone). Rows are taken in (time, content) order; a row not newer than the
        key's latest version (a late upsert, or a replayed one) emits nothing, so a replay of
        the same rows in any batching gives the same stream."""
        ns = f"changelog:{self.scope}:{node.id}"
        keys = self.keys_of(node.input)
        cols = [c for c in df.columns if c != index.DELETED]
        gone = (
            df[index.DELETED].astype("boolean").fillna(False).astype(bool).tolist()
            if index.DELETED in df.columns
            else [False] * len(df)
        )
        recs = to_records(df, cols)
        stamps = [micros(pd.Timestamp(t)) for t in pd.to_datetime(df[ts], utc=True)]
        seqs = [content_seq({**r, index.DELETED: g}) for r, g in zip(recs, gone, strict=True)]
        reader = OverlayReader(state, wb)
        latest: dict[bytes, dict[str, Any] | None] = {}
        emitted: list[dict[str, Any]] = []
        for i in sorted(range(len(df)), key=lambda i: (stamps[i], seqs[i])):
            k = key_prefix(tuple(recs[i][c] for c in keys))
            if k not in latest:
                raw = reader.get(ns, k)
                latest[k] = None if raw is None else loads(raw)
            prev = latest[k]
            if prev is not None and (stamps[i], seqs[i]) <= (prev["t"], prev["seq"]):
                continue
            if prev is not None and prev["row"] is not None:
                emitted.append({**prev["row"], ts: recs[i][ts], col: True})
            if not gone[i]:
                emitted.append({**recs[i], col: False})
            now = {"t": stamps[i], "seq": seqs[i], "row": None if gone[i] else recs[i]}
            latest[k] = now
            wb.put(ns, k, dumps(now))
        out = pd.DataFrame(emitted, columns=[*cols, col])
        for c in cols:
            if pd.api.types.is_datetime64_any_dtype(df[c]):
                out[c] = pd.to_datetime(out[c], utc=True, format="ISO8601")
            else:
                try:
                    out[c] = out[c].astype(df[c].dtype)
                except (TypeError, ValueError):
                    pass
        out[col] = out[col].astype(bool)
        return out

    def _first_latest(
        self,
        node: spec.FirstNode | spec.LatestNode,
        keys: tuple[str, ...],
        df: pd.DataFrame,
        ts: str,
        state: StateReader,
        wb: WriteBatch,
    ) -> pd.DataFrame:
        ns = f"{'first' if isinstance(node, spec.FirstNode) else 'latest'}:{self.scope}:{node.id}"
        reader = OverlayReader(state, wb)
        order = df.iloc[_time_content_order(df, ts)].reset_index(drop=True)
        stamps = _micros(order[ts])
        emit = []
        for i, row in enumerate(order[list(keys)].astype(object).to_numpy().tolist()):
            k = key_prefix(tuple(json_value(v) for v in row))
            t = stamps[i]
            prev = reader.get(ns, k)
            newer = prev is None or (
                t > int(prev) if isinstance(node, spec.LatestNode) else t < int(prev)
            )
            if newer:
                wb.put(ns, k, str(t).encode())
                emit.append(i)
        return order.iloc[emit].reset_index(drop=True)

    def _dedup(
        self,
        node: spec.DedupNode,
        df: pd.DataFrame,
        ts: str,
        state: StateReader,
        wb: WriteBatch,
        watermark: int | None = None,
    ) -> pd.DataFrame:
        """Without a window: a row repeating the ``by`` values and the time of an earlier one
        is dropped, at once. With a tumbling or session window: the last row per (``by``
        values, window), emitted once the watermark closes the window (``_dedup_windowed``);
        ``watermark=`` advances it without rows, as Spark does at the end of a backfill."""
        if node.window is not None:
            return self._dedup_windowed(node, node.window, df, ts, state, wb, watermark)
        ns = f"dedup:{self.scope}:{node.id}"
        by = list(node.by) or [c for c in df.columns if c != ts]
        reader = OverlayReader(state, wb)
        keep = []
        stamps = _micros(df[ts])
        # of several duplicates arriving together, the first in (time, content) order stays
        for i in _time_content_order(df, ts):
            ident = (
                json.dumps([json_value(df[c].iloc[i]) for c in by], sort_keys=True).encode()
                + b"\0"
                + str(stamps[i]).encode()
            )
            if reader.get(ns, ident) is None:
                wb.put(ns, ident, b"1")
                keep.append(i)
        return df.iloc[keep].reset_index(drop=True)

    def _dedup_windowed(
        self,
        node: spec.DedupNode,
        window: spec.WindowSpec,
        df: pd.DataFrame,
        ts: str,
        state: StateReader,
        wb: WriteBatch,
        watermark: int | None,
    ) -> pd.DataFrame:
        """Dedup within a window: of the rows sharing the ``by`` values in one tumbling window
        (``[k * duration, (k + 1) * duration)``) or one session (rows less than ``gap`` apart),
        the last in (time, content) order is kept, with its own timestamp.

        The window's row is emitted once, when the watermark (the newest event time the
        operator has seen, or ``watermark``) reaches the window's end: a tumbling window's
        end, a session's last event plus ``gap``. A row whose window has been emitted already
        (a tumbling window the watermark had passed, or a time before the end of the key's
        last emitted session) is late and dropped, as a windowed aggregate drops it.

        State ``dedup:<scope>:<node>:open``: per ``by`` key, its open windows as ``[start,
        end, time, row]`` (``row``: the kept row, canonical JSON) and ``upto``, the end of its
        last emitted session; ``:timers``: (end, key) for every open window, so a key that
        falls silent is still emitted when other keys move the watermark; ``:meta``: the
        watermark. Rows are taken in (time, content) order and windows merge whatever the
        batching, so the mock, the engine and Spark emit the same rows."""
        base = f"dedup:{self.scope}:{node.id}"
        open_ns, timers_ns, meta_ns = base + ":open", base + ":timers", base + ":meta"
        session = window.kind == "session"
        span = ((window.gap if session else window.duration) or 1) * 1_000_000
        by = list(node.by) or [c for c in df.columns if c != ts]
        cols = list(df.columns)
        reader = OverlayReader(state, wb)
        raw_mark = reader.get(meta_ns, b"watermark")
        old_mark = None if raw_mark is None else int(raw_mark)
        stamps = _micros(df[ts])
        recs = to_records(df, cols)
        keys: dict[bytes, dict[str, Any]] = {}

        def load(k: bytes) -> dict[str, Any]:
            if k not in keys:
                raw = reader.get(open_ns, k)
                keys[k] = {"upto": None, "open": []} if raw is None else loads(raw)
            return keys[k]

        for i in _time_content_order(df, ts):
            t, rec = stamps[i], recs[i]
            k = key_prefix(tuple(rec[c] for c in by))
            st = load(k)
            row = dumps(rec).decode()
            if session:
                if st["upto"] is not None and t < st["upto"]:
                    continue  # late: within or before the key's last emitted session
                near = [w for w in st["open"] if w[0] - span < t < w[1]]
                merged = [min([t, *(w[0] for w in near)]), max([t + span, *(w[1] for w in near)])]
                best = max([(t, row), *((w[2], w[3]) for w in near)])
                st["open"] = [w for w in st["open"] if w not in near]
                st["open"].append([*merged, *best])
            else:
                start = t // span * span
                if old_mark is not None and start + span <= old_mark:
                    continue  # late: its window has been emitted (or closed empty) already
                same = [w for w in st["open"] if w[0] == start]
                if not same:
                    st["open"].append([start, start + span, t, row])
                elif (t, row) > (same[0][2], same[0][3]):
                    same[0][2:] = [t, row]
            end = next(w[1] for w in st["open"] if w[0] <= t < w[1])
            wb.put(timers_ns, _dedup_timer(end) + k, k)
        mark = max([*stamps, *(m for m in (old_mark, watermark) if m is not None), -(2**62)])
        wb.put(meta_ns, b"watermark", str(mark).encode())
        reader = OverlayReader(state, wb)
        due = set()
        for timer, k in reader.scan(timers_ns, b"", _dedup_timer(mark + 1)):
            due.add(k)
            wb.delete(timers_ns, timer)
        out: list[tuple[int, str]] = []
        for k in keys.keys() | due:
            st = load(k)
            closed = [w for w in st["open"] if w[1] <= mark]
            st["open"] = [w for w in st["open"] if w[1] > mark]
            out.extend((w[2], w[3]) for w in closed)
            if session and closed:
                ends = [w[1] for w in closed] + ([] if st["upto"] is None else [st["upto"]])
                st["upto"] = max(ends)
            if st["open"]:
                wb.put(timers_ns, _dedup_timer(min(w[1] for w in st["open"])) + k, k)
            if st["open"] or st["upto"] is not None:
                wb.put(open_ns, k, dumps(st))
            else:
                wb.delete(open_ns, k)
        return self._dedup_rows(node, df, [loads(r.encode()) for _, r in sorted(out)])

    def _dedup_rows(
        self, node: spec.DedupNode, df: pd.DataFrame, records: list[dict[str, Any]]
    ) -> pd.DataFrame:
        """Rows kept in the state as JSON, back in the batch's column types (a dedup's input
        and output share one schema, and every batch carries it, even an empty one)."""
        out = pd.DataFrame(records, columns=list(df.columns))
        for c in df.columns:
            if pd.api.types.is_datetime64_any_dtype(df[c]):
                out[c] = pd.to_datetime(out[c], utc=True, format="ISO8601")
            elif df[c].dtype != object:
                out[c] = out[c].astype(df[c].dtype)
        return out


def _kept(n: int, bad: Mapping[int, str]) -> np.ndarray:
    """A mask of the ``n`` rows whose positions are not in ``bad``."""
    return np.array([i not in bad for i in range(n)], dtype=bool)


def _dedup_timer(end_us: int) -> bytes:
    """A timer key part sorting by window end (offset binary: negative times sort first)."""
    return (end_us + 2**63).to_bytes(8, "big")


def _micros(stamps: pd.Series) -> list[int]:
    return [micros(pd.Timestamp(t)) for t in stamps]


def _time_content_order(df: pd.DataFrame, ts: str) -> list[int]:
    """Row positions by event time, then by content among rows of one instant: the order the
    mock, the engine and Spark all take a batch in, whatever order its rows arrived in.
    Only rows that share an instant are encoded."""
    stamps = _micros(df[ts])
    tied = pd.Series(stamps).duplicated(keep=False).tolist()
    if not any(tied):
        return sorted(range(len(df)), key=stamps.__getitem__)
    rows = to_records(df.iloc[[i for i, t in enumerate(tied) if t]], list(df.columns))
    content = dict(zip((i for i, t in enumerate(tied) if t), map(dumps, rows), strict=True))
    return sorted(range(len(df)), key=lambda i: (stamps[i], content.get(i, b"")))


__all__ = ["BatchResult", "PipelineError", "PipelineExecutor", "RowError"]


def _renamed(node: spec.Node, ts: str) -> str:
    """The timestamp column after ``node``: a rename may rename it too."""
    if isinstance(node, spec.RenameNode):
        return dict(node.mapping).get(ts, ts)
    return ts
