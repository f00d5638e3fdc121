"""Continuous-window aggregations in one pass over history sorted by (key, time): what a
backfill computes count, sum, avg, min, max, distinct, LastK and count(unique) with.

The engine answers each event from state (``continuous``): its raw-event aggregations read
the window's events, so their cost grows with what the window holds (and Spark's own sliding
range frames recompute the frame per row too). History sorted by key and time needs none of
that: per key, a window moves forward and keeps running totals (exact, as the engine's
tiles), a monotonic queue (min, max), how often each value occurs (distinct, count(unique))
or where each value last occurred (LastK with dedup), so each event costs amortised O(1)
plus the size of its output. The values equal the engine's operator over the same events
(``tests/ops/test_sorted_runs.py``): events of one (key, time) count as in the engine,
ordered by their content sequence, and all of them are in the window of each (a window ends
at its time, inclusive).

Contract of ``SortedRuns.feed``: rows sorted by (key, time), and the rows of one (key, time)
never split between two calls.
"""

from __future__ import annotations

import json
from collections import OrderedDict, deque
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fennel_dagster.ops import tiles
from fennel_dagster.ops.aggregate.events import event_seq, first_free
from fennel_dagster.ops.aggregate.layout import US
from fennel_dagster.ops.limits import INT64_MAX, INT64_MIN
from fennel_dagster.ops.rows import json_value
from fennel_dagster.wire import spec

RUN_KINDS = ("distinct", "lastk", "count", "sum", "avg", "min", "max")
_CACHE_MAX = 65_536
_SCALE = 1126  # 2**-1126 divides every float: sums of floats held as exact ints
_INF = float("inf")


def runnable(agg: spec.AggSpec) -> bool:
    """Whether ``agg`` is computed here (a continuous or forever window, no lookback)."""
    w = agg.window
    if w.kind not in ("continuous", "forever") or w.lookback:
        return False
    if agg.kind in ("distinct", "lastk") or (agg.kind == "count" and agg.unique):
        return agg.of is not None
    return agg.kind in RUN_KINDS and (agg.of is not None or agg.kind == "count")


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

    ok = True  # whether the value is one the engine emits (not an error row)

    def __init__(self, agg: spec.AggSpec) -> None:
        self.agg = agg
        duration = None if agg.window.kind == "forever" else agg.window.duration
        self.span = None if duration is None else duration * US

    def low(self, t: int) -> int | None:
        return None if self.span is None else t - self.span

    def add(self, t: int, v: Any) -> None:
        raise NotImplementedError

    def advance(self, t: int) -> None:
        raise NotImplementedError

    def value(self) -> Any:
        raise NotImplementedError


class _Totals(_Window):
    """Count, sum and avg: the window's row count, non-null count and exact sum, as the
    engine's tiles keep them (``values.finish``): a float sum is the correctly rounded exact
    sum; an int sum beyond int64, or an infinite value, makes an error row."""

    def __init__(self, agg: spec.AggSpec, floats: bool) -> None:
        super().__init__(agg)
        self.floats = floats
        self.summed = agg.kind != "count"
        self.rows = self.count = self.total = self.infinite = 0
        # (time, value): the value, not its exact int (a float's is ~1,100 bits)
        self.events: deque[tuple[int, Any]] = deque()

    def _exact(self, v: Any) -> Any:
        """What ``v`` adds to the exact total (``_INF``: an infinite float)."""
        if not self.summed:
            return 0
        if not self.floats:
            return int(v)
        if v == _INF or v == -_INF:
            return _INF
        n, e = tiles.exact(v)
        return n << (e + _SCALE)

    def add(self, t: int, v: Any) -> None:
        self.rows += 1
        if v is not None:
            self.count += 1
            x = self._exact(v)
            if x is _INF:
                self.infinite += 1
            else:
                self.total += x
        if self.span is not None:
            self.events.append((t, v))

    def advance(self, t: int) -> None:
        lo = self.low(t)
        if lo is None:
            return
        events = self.events
        while events and events[0][0] < lo:
            _, v = events.popleft()
            self.rows -= 1
            if v is None:
                continue
            self.count -= 1
            x = self._exact(v)
            if x is _INF:
                self.infinite -= 1
            else:
                self.total -= x

    def value(self) -> Any:
        a = self.agg
        self.ok = True
        if a.kind == "count":
            return self.count if a.of and a.dropnull else self.rows
        if self.infinite:
            self.ok = False
            return None
        if self.count == 0:
            return 0 if a.kind == "sum" else a.default
        if a.kind == "sum" and not self.floats:
            self.ok = INT64_MIN <= self.total <= INT64_MAX
            return self.total
        k = 1 if a.kind == "sum" else self.count
        try:  # int true division rounds correctly, as the engine's ``_ratio``
            return self.total / (k << _SCALE) if self.floats else self.total / k
        except OverflowError:
            self.ok = False
            return None


class _Extreme(_Window):
    """Min or max: a monotonic queue of the window's values (amortised O(1) per event)."""

    def __init__(self, agg: spec.AggSpec, floats: bool) -> None:
        super().__init__(agg)
        self.floats = floats
        self.queue: deque[tuple[int, Any]] = deque()
        self.most = agg.kind == "max"

    def add(self, t: int, v: Any) -> None:
        if v is None:
            return
        q = self.queue
        if self.most:
            while q and q[-1][1] <= v:
                q.pop()
        else:
            while q and q[-1][1] >= v:
                q.pop()
        q.append((t, v))

    def advance(self, t: int) -> None:
        lo = self.low(t)
        if lo is None:
            return
        q = self.queue
        while q and q[0][0] < lo:
            q.popleft()

    def value(self) -> Any:
        if not self.queue:
            self.ok = True
            return self.agg.default
        v = self.queue[0][1]
        self.ok = v not in (_INF, -_INF)
        return float(v) if self.floats else v


class _Counts(_Window):
    """How often each value occurs in the window: distinct and count(unique)."""

    def __init__(self, agg: spec.AggSpec, tags: _Tags) -> None:
        super().__init__(agg)
        self.tags = tags
        self.counts: dict[str, list[Any]] = {}  # tag -> [occurrences, value]
        self.events: deque[tuple[int, str]] = deque()
        self.version = 0  # moves whenever the set of values changes
        self._made: tuple[int, Any] = (-1, None)

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

    def value(self) -> Any:
        if self._made[0] == self.version:
            return self._made[1]  # the same values as the previous time: one list for both
        counts, a = self.counts, self.agg
        value: Any
        if a.kind == "count":  # count(unique): the non-null values
            value = len(counts) - (1 if "null" in counts else 0)
        else:
            value = [counts[tag][1] for tag in sorted(counts) if not (a.dropnull and tag == "null")]
        self._made = (self.version, value)
        return value


class _Recent(_Window):
    """The window's values newest first: LastK (with dedup, each value at its newest)."""

    def __init__(self, agg: spec.AggSpec, tags: _Tags) -> None:
        super().__init__(agg)
        self.tags = tags
        self.latest: OrderedDict[str, tuple[int, Any]] = OrderedDict()  # dedup: by last time
        # no dedup: only the newest ``limit`` can ever be answered (nulls: when they count)
        self.events: deque[tuple[int, Any]] = deque(maxlen=max(agg.limit or 0, 1))

    def add(self, t: int, v: Any) -> None:
        if self.agg.dedup:
            tag = self.tags(v)
            latest = self.latest
            if tag in latest:
                latest.move_to_end(tag)
            latest[tag] = (t, v)
        elif v is not None or not self.agg.dropnull:
            self.events.append((t, v))

    def advance(self, t: int) -> None:
        lo = self.low(t)
        if lo is None:
            return
        if self.agg.dedup:
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

    def value(self) -> Any:
        out: list[Any] = []
        limit, dropnull = self.agg.limit or 0, self.agg.dropnull
        source = reversed(self.latest.values()) if self.agg.dedup else reversed(self.events)
        for _, v in source:
            if len(out) >= limit:
                break
            if v is None and dropnull:
                continue
            out.append(v)
        return out


@dataclass
class Fed:
    """Each row's values per aggregation, and whether the row is one the engine emits (an
    int sum beyond int64 or an infinite float makes an error row there, none here)."""

    values: dict[str, list[Any]]
    ok: list[bool]


class SortedRuns:
    """Per key, the windows of ``aggs`` moved forward over time-sorted events."""

    def __init__(
        self,
        aggs: Sequence[spec.AggSpec],
        of_columns: Sequence[str],
        floats: Collection[str] = (),
    ) -> None:
        """``of_columns``: every column the node reads (its ties' order); ``floats``: those
        of a float type (an int column's sums stay ints)."""
        assert all(runnable(a) for a in aggs), "not a sorted-run aggregation"
        self.aggs = list(aggs)
        self.of_columns = list(of_columns)
        self.floats = set(floats)
        self.ordered = any(a.kind == "lastk" for a in aggs)  # ties need the engine's order
        self._tags = {a.of: _Tags() for a in aggs if a.of}
        self._key: Any = object()
        self._runs: list[_Window] = []

    def _reset(self) -> None:
        self._runs = []
        for a in self.aggs:
            floats = a.of in self.floats
            run: _Window
            if a.kind == "lastk":
                run = _Recent(a, self._tags[a.of or ""])
            elif a.kind == "distinct" or a.unique:
                run = _Counts(a, self._tags[a.of or ""])
            elif a.kind in ("min", "max"):
                run = _Extreme(a, floats)
            else:
                run = _Totals(a, floats)
            self._runs.append(run)

    def feed(
        self, keys: Sequence[Any], times: Sequence[int], cols: Mapping[str, Sequence[Any]]
    ) -> Fed:
        """Each row's values. ``keys``: hashable group keys; ``times``: event times (us);
        ``cols``: every column in ``of_columns``, as JSON-safe values (None for null)."""
        n = len(times)
        out: dict[str, list[Any]] = {a.into: [None] * n for a in self.aggs}
        ok = [True] * n
        ones = [1] * n
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
            fine = True
            for a, run in zip(self.aggs, self._runs, strict=True):
                col = cols[a.of] if a.of else ones
                for r in rows:
                    run.add(t, col[r])
                run.advance(t)
                value = run.value()
                fine = fine and run.ok
                into = out[a.into]
                for r in range(i, j):
                    into[r] = value
            if not fine:
                for r in range(i, j):
                    ok[r] = False
            i = j
        return Fed(out, ok)

    def _in_engine_order(
        self, key: Any, i: int, j: int, cols: Mapping[str, Sequence[Any]]
    ) -> list[int]:
        """Rows ``i..j`` (one key, one time) in the order the engine stores them (by
        ``event_seq``, a repeat of identical content at ``first_free``)."""
        k = list(key) if isinstance(key, tuple) else [key]
        taken: set[int] = set()
        seqs: list[tuple[int, int]] = []
        for r in range(i, j):
            rec = {c: cols[c][r] for c in self.of_columns}
            seq = first_free(event_seq(rec, [json_value(x) for x in k]), taken)
            taken.add(seq)
            seqs.append((seq, r))
        return [r for _, r in sorted(seqs)]
