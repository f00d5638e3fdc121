"""``groupby(...).aggregate(...)``: windowed aggregations over per-key event history.

State of a continuous (or ``forever``) aggregate, two namespaces:

- ``agg:<scope>:<node>``: one entry per input event under ``entry_key(group key, event time,
  content seq)`` holding the fields the aggregations read (identical events get consecutive
  sequence numbers, so they count as often as they occur whatever the batching): a fixed-width
  binary record (time, sequence, per field a tag and 8 bytes) when every field is null, an
  int64 or a float, else the canonical JSON record;
- ``agg:<scope>:<node>:tiles``: per (group key, tile size, tile index) the exact partial
  aggregates of the key's events in that tile (``ops/tiles.py``): row count, and per column
  read by a count/sum/avg/min/max/stddev its non-null count, exact sum and sum of squares
  (dyadic integers), min and max; a fixed-width binary record when the sums fit 128 bits,
  else JSON (the formats: ``codec.py``). Each window's top level is kept in pages of 16
  tiles an entry (``layout.TOP_PAGE``), so an hour's window reads a key's ~57 top tiles as
  four or five entries; per group key, under its bare prefix, the time of the newest event
  it holds (``newest.py``: a batch in order reads none of its raw events).

Exactness. The value at time ``t`` aggregates exactly the key's events with event time in
``[t - duration, t]`` (both ends, as in Fennel; ``forever``: all up to ``t``), whatever order and batching they arrived
in; a late event inside the source's ``disorder`` changes every later lookup, while rows
already emitted are not retracted. The window is assembled as raw events of the partial tile
at each end plus whole tiles in between (``tiles.plan``): a continuous window of duration
``d`` has tiles of ~``d/32`` and finer levels for its ends, by factors of 32 down to 2 s or
less; ``forever`` a hierarchy 2**36 s .. 2 s, so a prefix is <= 31 tiles per level. A key
with hundreds of events a second still reads only a few seconds of raw events per query.
State written before the 2 s levels (no levels marker in the tiles namespace) keeps the old
levels (down to 64 s), and state written before pages keeps a tile an entry:
``continuous.layout_of``. Counts, integer sums, min
and max are exact; a float sum is the correctly rounded exact sum (so it can differ in the
last bits from a left-to-right float sum, but never depends on order or batching); avg and
stddev are computed from the exact sums (stddev: population). Quantile, distinct, lastk/firstk
and count(unique) are not decomposable: they read the window's raw events (quantile: exactly
Fennel's element at rank floor(p * n) of the sorted values, even with ``approx=True``; count(unique, approx=True) is exact too).
An exponential decay sum (``exp_decay``) depends on the time it is read at: it reads the
window's raw events too and weighs each by ``0.5 ** (age / half_life)`` at the query time
(``values.exp_decay_sum``: the correctly rounded sum of the terms; the positive or the
negative terms read as 0 once their sum decays under e**-25, as on Fennel).

Cost. Per batch, per key of the batch: a few range scans (raw events of the edge tiles,
whole tiles per level); then, for the whole batch at once with numpy: the binary values
decoded (one ``frombuffer`` per namespace and level), one raw entry per event and one tile
update per touched tile and level into the ``WriteBatch`` (grouped sums, ``reduceat``), and
every event's values (prefix sums and ``searchsorted`` per source). Per event: O(1) state
writes and O(levels) array work (a page rewritten a key and batch: a few kB at most); per
lookup: <= ~64 tiles, five top-level entries at most, + the raw events of two fine edge
tiles (``forever``: <= 31 tiles per level + one 2 s tile), independent of the history's
length. Emission: one row per event with the aggregates as of its own time, after the whole
batch is recorded.

Tumbling, hopping and session windows: see ``windowed.py``.

Modules (one concern each): ``layout`` (what a continuous node keeps), ``values`` (the maths
of one aggregation), ``stats`` (columnar partial aggregates, tile merging), ``codec`` (the
binary/JSON value formats), ``events`` (namespaces, per-key event recording and reading),
``continuous`` (continuous/forever windows), ``windowed`` (tumbling/hopping/session),
``lookup`` (reading an aggregate dataset as of a time).
"""

from fennel_dagster.ops.aggregate.continuous import run_continuous, values_at
from fennel_dagster.ops.aggregate.events import (
    key_tuples,
    namespace,
    record_events,
    tiles_namespace,
)
from fennel_dagster.ops.aggregate.layout import TILED, US
from fennel_dagster.ops.aggregate.lookup import aggregate_at, is_continuous, lookup_aggregate
from fennel_dagster.ops.aggregate.values import aggregate_values
from fennel_dagster.ops.aggregate.windowed import run_windowed

__all__ = [
    "TILED",
    "US",
    "aggregate_at",
    "aggregate_values",
    "is_continuous",
    "key_tuples",
    "lookup_aggregate",
    "namespace",
    "record_events",
    "run_continuous",
    "run_windowed",
    "tiles_namespace",
    "values_at",
]
