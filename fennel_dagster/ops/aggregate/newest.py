"""The newest event time each key holds, kept beside its tiles.

A batch in order asks, per key, whether anything held is later than its events (``edges``:
then a window's right end is the held top tile plus the batch). Asked of the raw events,
that is a seek a key in the namespace with an entry per event, the costliest seek a batch
makes (about 14 us against 2-3 in the tiles', measured live); asked of this entry, one point
read among the batch's others. A key with nothing held after a query reads no raw events
for it.

The entry lives in the tiles namespace under the key's bare prefix: it sorts before the
key's tiles, and no tile read's bounds include it. Every batch that records events brings
it up to date. State written before it has none: the key's last raw event says it, found
once with one seek.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

from fennel_dagster.ops.keys import prefix_end, split_entry
from fennel_dagster.ops.state import REWRITTEN_SUFFIX, StateReader, WriteBatch

NONE_HELD = np.iinfo(np.int64).min  # a key that holds no event
_NEWEST = struct.Struct("<q")


def is_newest_key(key: bytes) -> bool:
    """Whether a key of the tiles namespace is a newest-event entry: a bare key prefix, whose
    only NUL byte ends it (a tile's key goes on past its prefix's)."""
    return key.find(b"\0") == len(key) - 1


def newest_held(reader: StateReader, ns: str, prefixes: Sequence[bytes]) -> np.ndarray:
    """Per key (its state prefix), the time of the newest event its raw namespace ``ns``
    holds, in microseconds; ``NONE_HELD`` where it holds none."""
    got = reader.multi_get(ns + REWRITTEN_SUFFIX, list(prefixes))
    out = np.full(len(prefixes), NONE_HELD, dtype=np.int64)
    for i, value in enumerate(got):
        if value is not None:
            out[i] = _NEWEST.unpack(value)[0]
            continue
        last = reader.last(ns, prefixes[i], prefix_end(prefixes[i]))
        if last is not None:
            out[i] = split_entry(last[0])[0]
    return out


def record_newest(
    wb: WriteBatch,
    ns: str,
    prefixes: Sequence[bytes],
    held: np.ndarray,
    qk: np.ndarray,
    hi: np.ndarray,
) -> None:
    """Each key's entry once the batch's events (time ``hi``, key id ``qk``, sorted by key id;
    every key id has one) are held too."""
    if not len(qk):  # an empty batch (every row dropped upstream): nothing newer is held
        return
    starts = np.flatnonzero(np.r_[True, qk[1:] != qk[:-1]])
    newest = held.copy()
    newest[qk[starts]] = np.maximum(held[qk[starts]], np.maximum.reduceat(hi, starts))
    pack = _NEWEST.pack
    wb.space(ns + REWRITTEN_SUFFIX).update(
        zip(prefixes, [pack(v) for v in newest.tolist()], strict=True)
    )
