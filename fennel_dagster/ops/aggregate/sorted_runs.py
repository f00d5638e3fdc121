"""Distinct, LastK and count(unique) over continuous windows, in one pass over history sorted
by (key, time): what a backfill computes them with.

The engine answers each event from state (``continuous``): every event reads its window's raw
events, so its cost grows with what the window holds. History sorted by key and time needs
none of that: per key, a window moves forward and keeps per value how often it occurs in the
window (distinct, count(unique)) or where it last occurred (LastK with dedup), so each event
costs O(1) plus the size of its output. The values equal ``values.aggregate_values`` over the
same events (``tests/ops/test_sorted_runs.py`` proves it against the engine's operator):
events of one (key, time) count as in the engine, ordered by their content sequence, and all
of them are in the window of each (a window ends at its time, inclusive).

Contract of ``SortedRuns.feed``: rows sorted by (key, time), and the rows of one (key, time)
never split between two calls.
"""

from __future__ import annotations

import json
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from typing import Any

from fennel_dagster.ops.aggregate.layout import US
from fennel_dagster.ops.rows import content_seq, json_value
from fennel_dagster.wire import spec

RUN_KINDS = ("distinct", "lastk")
_CACHE_MAX = 65_536


def runnable(agg: spec.AggSpec) -> bool:
    """Whether ``agg`` is computed here (a continuous or forever window, no lookback)."""
    w = agg.window
    if w.kind not in ("continuous", "forever") or w.lookback or agg.of is None:
        return False
    return agg.kind in RUN_KINDS or (agg.kind == "count" and agg.unique)


class _Tags:
    """A value's canonical JSON text (the engine's identity of a value in dedup and distinct,
    and the order of a distinct list), cached per column: values repeat."""

    def __init__(self) -> None:
        self._cache: dict[Any, str] = {}

    def __call__(self, v: Any) -> str:
        if isinstance(v, float) and v == 0:  # 0.0 and -0.0 are one dict key, two texts
            return json.dumps(v)
        tag = self._cache.get(v)
        if tag is None:
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            tag = self._cache[v] = json.dumps(v, sort_keys=True)
        return tag


class _Window:
    """The events of one key with time in ``[t - duration, t]`` (all of them: ``forever``)."""

    def __init__(self, duration: int | None) -> None:
        self.span = None if duration is None else duration * US

    def low(self, t: int) -> int | None:
        return None if self.span is None else t - self.span


class _Counts(_Window):
    """How often each value occurs in the window: distinct and count(unique)."""

    def __init__(self, duration: int | None, tags: _Tags) -> None:
        super().__init__(duration)
        self.tags = tags
        self.counts: dict[str, list[Any]] = {}  # tag -> [occurrences, value]
        self.events: deque[tuple[int, str]] = deque()
        self.version = 0  # moves whenever the set of values changes

    def add(self, t: int, v: Any) -> None:
        tag = self.tags(v)
        slot = self.counts.get(tag)
        if slot is None:
            self.counts[tag] = [1, v]
            self.version += 1
        else:
            slot[0] += 1
        if self.span is not None:
            self.events.append((t, tag))

    def advance(self, t: int) -> None:
        lo = self.low(t)
        if lo is None:
            return
        events, counts = self.events, self.counts
        while events and events[0][0] < lo:
            _, tag = events.popleft()
            slot = counts[tag]
            slot[0] -= 1
            if slot[0] == 0:
                del counts[tag]
                self.version += 1


class _Recent(_Window):
    """The window's values newest first: LastK (with dedup, each value at its newest)."""

    def __init__(self, duration: int | None, tags: _Tags, dedup: bool) -> None:
        super().__init__(duration)
        self.tags = tags
        self.dedup = dedup
        self.latest: OrderedDict[str, tuple[int, Any]] = OrderedDict()  # dedup: by last time
        self.events: deque[tuple[int, Any]] = deque()

    def add(self, t: int, v: Any) -> None:
        if self.dedup:
            tag = self.tags(v)
            latest = self.latest
            if tag in latest:
                latest.move_to_end(tag)
            latest[tag] = (t, v)
        else:
            self.events.append((t, v))

    def advance(self, t: int) -> None:
        lo = self.low(t)
        if lo is None:
            return
        if self.dedup:
            latest = self.latest
            while latest:
                tag, (first_t, _) = next(iter(latest.items()))
                if first_t >= lo:
                    break
                del latest[tag]
        else:
            events = self.events
            while events and events[0][0] < lo:
                events.popleft()

    def newest(self, limit: int, dropnull: bool) -> list[Any]:
        out: list[Any] = []
        source = reversed(self.latest.values()) if self.dedup else reversed(self.events)
        for _, v in source:
            if len(out) >= limit:
                break
            if v is None and dropnull:
                continue
            out.append(v)
        return out


class SortedRuns:
    """Per key, the windows of ``aggs`` moved forward over time-sorted events."""

    def __init__(self, aggs: Sequence[spec.AggSpec], of_columns: Sequence[str]) -> None:
        assert all(runnable(a) for a in aggs), "not a sorted-run aggregation"
        self.aggs = list(aggs)
        self.of_columns = list(of_columns)  # every column the node reads: its content seq
        self.ordered = any(a.kind == "lastk" for a in aggs)  # ties need the engine's order
        self._tags = {a.of: _Tags() for a in aggs if a.of}
        self._key: Any = object()
        self._runs: dict[str, _Counts | _Recent] = {}
        self._made: dict[str, tuple[int, Any]] = {}  # into -> (version, value) of a _Counts

    def _reset(self) -> None:
        self._runs = {}
        self._made = {}
        for a in self.aggs:
            assert a.of is not None
            duration = None if a.window.kind == "forever" else a.window.duration
            if a.kind == "lastk":
                self._runs[a.into] = _Recent(duration, self._tags[a.of], a.dedup)
            else:
                self._runs[a.into] = _Counts(duration, self._tags[a.of])

    def feed(
        self, keys: Sequence[Any], times: Sequence[int], cols: Mapping[str, Sequence[Any]]
    ) -> dict[str, list[Any]]:
        """Each row's values. ``keys``: hashable group keys; ``times``: event times (us);
        ``cols``: every column in ``of_columns``, as JSON-safe values (None for null)."""
        n = len(times)
        out: dict[str, list[Any]] = {a.into: [None] * n for a in self.aggs}
        i = 0
        while i < n:
            k, t = keys[i], times[i]
            j = i + 1
            while j < n and times[j] == t and keys[j] == k:
                j += 1
            if k != self._key:
                self._key = k
                self._reset()
            rows = (
                self._in_engine_order(k, i, j, cols) if j - i > 1 and self.ordered else range(i, j)
            )
            for a in self.aggs:
                run = self._runs[a.into]
                col = cols[a.of or ""]
                for r in rows:
                    run.add(t, col[r])
                run.advance(t)
                value = self._value(a, run)
                into = out[a.into]
                for r in range(i, j):
                    into[r] = value
            i = j
        return out

    def _value(self, a: spec.AggSpec, run: _Counts | _Recent) -> Any:
        if isinstance(run, _Recent):
            return run.newest(a.limit or 0, a.dropnull)
        made = self._made.get(a.into)
        if made is not None and made[0] == run.version:
            return made[1]  # the same values as the previous time: one list for both
        counts = run.counts
        value: Any
        if a.kind == "count":  # count(unique): the non-null values
            value = len(counts) - (1 if "null" in counts else 0)
        else:
            value = [counts[tag][1] for tag in sorted(counts) if not (a.dropnull and tag == "null")]
        self._made[a.into] = (run.version, value)
        return value

    def _in_engine_order(
        self, key: Any, i: int, j: int, cols: Mapping[str, Sequence[Any]]
    ) -> list[int]:
        """Rows ``i..j`` (one key, one time) as the engine stores them: by content sequence,
        a repeat of identical content one past the previous (``continuous._record``)."""
        k = list(key) if isinstance(key, tuple) else [key]
        taken: set[int] = set()
        seqs: list[tuple[int, int]] = []
        for r in range(i, j):
            rec = {c: cols[c][r] for c in self.of_columns}
            seq = content_seq({**rec, "_k": [json_value(x) for x in k]})
            while seq in taken:
                seq += 1
            taken.add(seq)
            seqs.append((seq, r))
        return [r for _, r in sorted(seqs)]
