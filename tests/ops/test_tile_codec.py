"""Tiles merged and packed with numpy (``packed_tiles``) are, byte for byte, what the Python
path (``merge_tiles`` then ``encode_tile``) gives, and read back to the same table."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fennel_dagster.ops.aggregate.codec import (
    bits_of,
    decode_tiles,
    encode_tile,
    event_cols,
    packed_tiles,
    tag_of,
    tile_keys,
    tile_pages,
    tiles_table,
)
from fennel_dagster.ops.aggregate.layout import Layout
from fennel_dagster.ops.aggregate.stats import (
    Table,
    merge_tiles,
    pair_codes,
    sorted_table,
    stats_from_lists,
)
from fennel_dagster.wire import spec

W = spec.WindowSpec("continuous", duration=3600)
AGGS = (spec.AggSpec("sum", "s", W, of="a"), spec.AggSpec("min", "lo", W, of="b"),
        spec.AggSpec("max", "hi", W, of="b"), spec.AggSpec("count", "n", W))  # fmt: skip
NODE = spec.AggregateNode("n1", "n0", ("uid",), AGGS)
SQUARES = spec.AggregateNode("n1", "n0", ("uid",), (*AGGS, spec.AggSpec("stddev", "sd", W, of="a")))

# counts, amounts, dyadic fractions: their exact sums fit int64, numpy merges them
small = st.one_of(
    st.none(),
    st.integers(-(2**30), 2**30),
    st.sampled_from([0.0, -0.0, 0.5, -2.25, 7.0, 37.0]),
    st.integers(-(2**20), 2**20).map(lambda i: i / 64),
)
# and values whose exact sums may need Python's ints (past 61 bits: 8192 + 99.99 does, in
# units of 99.99's last bit): the Python path merges those
wide = st.one_of(small, st.integers(-(2**62), 2**62),
                 st.sampled_from([99.99, 0.1, 1e-300, 3.5e300, 2.0**60]))  # fmt: skip
events_of = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4), small, small), max_size=60)


@settings(max_examples=150, deadline=None)
@given(events_of)
def test_packed_tiles_equal_the_python_merge_and_encoding(
    events: list[tuple[int, int, object, object]],
) -> None:
    assert _check(NODE, events, must_pack=True)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4), wide, wide), max_size=40),
       st.booleans())  # fmt: skip
def test_values_past_int64_sums_fall_back_and_what_packs_still_equals(
    events: list[tuple[int, int, object, object]], squares: bool
) -> None:
    _check(SQUARES if squares else NODE, events, must_pack=False)


@settings(max_examples=50, deadline=None)
@given(events_of)
def test_a_batch_of_new_keys_merged_with_no_tiles_read_still_packs(
    events: list[tuple[int, int, object, object]],
) -> None:
    """A batch whose keys have no tiles yet merges its events with an empty read: that read
    must not turn the columns into Python objects, which only the slow path merges."""
    none_read = decode_tiles(Layout.of(NODE), np.zeros(0, np.int64), [])
    for c, st_ in none_read.cols.items():
        assert all(v.dtype != object for v in st_.values()), c
    assert _check(NODE, events, must_pack=True, read=none_read)


def _check(node: spec.AggregateNode, events: list[tuple[int, int, object, object]],
           must_pack: bool, read: Table | None = None) -> bool:  # fmt: skip
    lay = Layout.of(node)
    names = sorted(lay.cols)
    if not events:
        return True
    t = _events_table(lay, events)
    kid, pos = t.kid, t.pos
    if read is not None:  # tiles read for these keys (none, here), then the batch's events
        t = Table.concat([read, t])
    code = kid * 16 + pos
    groups, gid = np.unique(code, return_inverse=True)
    first = np.searchsorted(gid, np.arange(len(groups)))
    rows = np.add.reduceat(t.n, first)
    packed = packed_tiles(lay, t, first, pos[first], rows)
    if packed is None:
        assert not must_pack, "a batch of small values went the Python way"
        return False
    merged = merge_tiles(lay, t, gid, len(groups))
    want = [encode_tile(int(i), r, s, names) for i, (r, s) in zip(pos[first], merged, strict=True)]
    w = packed.dtype.itemsize
    buf = packed.tobytes()
    assert [buf[g * w : (g + 1) * w] for g in range(len(groups))] == want
    a = tiles_table(kid[first], packed, names)
    b = decode_tiles(lay, kid[first], want)
    assert a.pos.tolist() == b.pos.tolist() and a.n.tolist() == b.n.tolist()
    for c in names:
        for k in a.cols[c]:
            assert a.cols[c][k].tolist() == b.cols[c][k].tolist(), (c, k)
    return True


PAIRS = st.lists(
    st.tuples(st.integers(0, 50), st.integers(-(2**62), 2**62) | st.integers(-5, 5)), max_size=20
)


@settings(max_examples=300, deadline=None)
@given(PAIRS, PAIRS.filter(bool))
def test_tile_codes_are_equal_and_ordered_as_their_key_and_index_pairs(
    old: list[tuple[int, int]], new: list[tuple[int, int]]
) -> None:
    """Folding a batch into its tiles codes each (key id, tile index) as one int64: with
    offsets in the indexes' span, or their ranks where that could overflow."""
    col = lambda rows, j: np.array([r[j] for r in rows], dtype=np.int64)  # noqa: E731
    a, b = pair_codes([col(old, 0), col(new, 0)], [col(old, 1), col(new, 1)])
    pairs, codes = old + new, np.concatenate([a, b]).tolist()
    for p, c in zip(pairs, codes, strict=True):
        for q, d in zip(pairs, codes, strict=True):
            assert (p == q) == (c == d) and (p < q) == (c < d)


@settings(max_examples=300, deadline=None)
@given(PAIRS, PAIRS)
def test_sorted_table_is_the_stable_sort_by_key_then_position(
    first: list[tuple[int, int]], then: list[tuple[int, int]]
) -> None:
    """Two runs, each sorted or not, put together as a batch's tables are; the order must be
    numpy's stable lexsort, ties (a key's events at one instant) in the order they came."""
    rows = sorted(first) + then
    kid = np.array([k for k, _ in rows], dtype=np.int64)
    pos = np.array([p for _, p in rows], dtype=np.int64)
    t = Table(kid, pos, np.arange(len(rows), dtype=np.int64), {})
    want = np.lexsort((pos, kid))
    got = sorted_table(t)
    assert got.n.tolist() == want.tolist()
    assert got.kid.tolist() == kid[want].tolist() and got.pos.tolist() == pos[want].tolist()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-9, 9), wide, wide), max_size=40),
       st.sampled_from([1, 2, 4, 16]), st.booleans())  # fmt: skip
def test_pages_of_tiles_read_back_as_the_tiles_and_hold_the_same_bytes(
    events: list[tuple[int, int, object, object]], page: int, squares: bool
) -> None:
    """A page is its tiles' values back to back, or one JSON list where one of them does not
    fit; read, it gives the tiles it was written from, at negative indexes too."""
    lay = Layout.of(SQUARES if squares else NODE)
    names = sorted(lay.cols)
    tiles = _merged(lay, events)
    if tiles is None:
        return
    kids, pages, values = tile_pages(lay, tiles, page)
    assert sorted(set(zip(kids.tolist(), pages.tolist(), strict=True))) == sorted(
        {(k, i // page) for k, i in zip(tiles.kid.tolist(), tiles.pos.tolist(), strict=True)}
    )
    keys = tile_keys([b"[%d]\0" % k for k in kids.tolist()], 64, pages)
    back = decode_tiles(lay, kids, list(zip(keys, values, strict=True)))
    assert back.kid.tolist() == tiles.kid.tolist() and back.pos.tolist() == tiles.pos.tolist()
    assert back.n.tolist() == tiles.n.tolist()
    for c in names:
        for k in tiles.cols[c]:
            assert back.cols[c][k].tolist() == tiles.cols[c][k].tolist(), (c, k)
    if page == 1:  # a tile an entry: the value ``encode_tile`` gives, as before pages
        merged = merge_tiles(lay, tiles, np.arange(len(tiles.kid)), len(tiles.kid))
        assert values == [encode_tile(i, r, s, names)
                          for i, (r, s) in zip(tiles.pos.tolist(), merged, strict=True)]  # fmt: skip


def _merged(lay: Layout, events: list[tuple[int, int, object, object]]) -> Table | None:
    """The tiles the events make (one per key id and index), sorted."""
    names = sorted(lay.cols)
    if not events:
        return None
    t = _events_table(lay, events)
    kid, pos = t.kid, t.pos
    (code,) = pair_codes([kid], [pos])
    _, gid = np.unique(code, return_inverse=True)
    first = np.flatnonzero(np.r_[True, gid[1:] != gid[:-1]])
    merged = merge_tiles(lay, t, gid, len(first))
    # as read: a tile written as JSON needs its key for its index
    keys = tile_keys([b"[0]\0"] * len(first), 64, pos[first])
    items = [(k, encode_tile(int(i), r, s, names))
             for k, i, (r, s) in zip(keys, pos[first].tolist(), merged, strict=True)]  # fmt: skip
    return decode_tiles(lay, kid[first], items)


def test_a_page_with_a_tile_past_the_binary_record_is_json_and_reads_back() -> None:
    """An int beyond int64 as a max does not fit a tile's record: one tile an entry, that
    tile is JSON (its index in its key); in a page, the whole page is JSON with indexes."""
    lay = Layout.of(NODE)
    big = [[1, 0, 1, 70, 0, 0, 1 << 70, 1 << 70], [1, 0, 5, 0, 0, 0, 5, 5]]  # canonical sums
    small = [[2, 1, 3, 0, 0, 0, 1.0, 2.0], [1, 0, 7, 0, 0, 0, 7, 7]]
    cols = {"a": stats_from_lists(small), "b": stats_from_lists(big)}
    tiles = Table(np.array([0, 0]), np.array([4, 6]), np.array([2, 1]), cols)
    for page, first_bytes in ((1, [b"{", b"\x01"]), (4, [b"{"]), (8, [b"{"])):
        kids, pages, values = tile_pages(lay, tiles, page)
        assert [v[:1] for v in values] == first_bytes
        keys = tile_keys([b"[0]\0"] * len(kids), 64, pages)
        back = decode_tiles(lay, kids, list(zip(keys, values, strict=True)))
        assert back.pos.tolist() == [4, 6] and back.n.tolist() == [2, 1]
        for c in ("a", "b"):
            for k in cols[c]:
                assert back.cols[c][k].tolist() == cols[c][k].tolist(), (page, c, k)


def _events_table(lay: Layout, events: list[tuple[int, int, object, object]]) -> Table:
    """The events (key id, tile index, a value per column) as single-event partial aggregates,
    sorted by key id and index."""
    events = sorted(events, key=lambda e: (e[0], e[1]))
    cols = {}
    for j, c in enumerate(sorted(lay.cols)):
        vals = [e[2 + j] for e in events]
        tags = np.array([tag_of(v) for v in vals], np.uint8)
        bits = np.array([bits_of(v, int(t)) for v, t in zip(vals, tags, strict=True)], np.int64)
        got = event_cols(tags, bits, lay.cols[c])
        assert got is not None
        cols[c] = got
    kid = np.array([e[0] for e in events], np.int64)
    pos = np.array([e[1] for e in events], np.int64)
    return Table(kid, pos, np.ones(len(events), np.int64), cols)
