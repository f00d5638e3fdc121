"""A batch's key prefixes, event keys, tile keys and sequences computed at once
(``key_prefixes``, ``entries``, ``tile_keys``, ``free_seqs``) equal what ``key_prefix``,
``entry``, ``tile_key`` and ``first_free`` give one by one, collisions included; prefixes
of one length (packed beside their rows by numpy) and of several alike, NUL bytes at either
end included."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fennel_dagster.ops.aggregate.codec import tile_key, tile_keys
from fennel_dagster.ops.aggregate.events import first_free, free_seqs
from fennel_dagster.ops.keys import entries, entry, key_prefix, key_prefixes, prefixed, row_bytes

TIMES = st.integers(-(2**62), 2**62) | st.sampled_from([-1, 0, 1, 2**62, -(2**62)])


KEY_VALUES = st.integers() | st.booleans() | st.none() | st.text(max_size=3) | st.floats()


@given(st.lists(st.tuples(st.integers()), max_size=20)
       | st.lists(st.tuples(KEY_VALUES), max_size=20)
       | st.lists(st.tuples(KEY_VALUES, KEY_VALUES), max_size=20))  # fmt: skip
def test_key_prefixes_equal_key_prefix_one_by_one(keys: list[tuple[object, ...]]) -> None:
    assert key_prefixes(keys) == [key_prefix(k) for k in keys]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=4), TIMES, st.integers(0, 2**64 - 1)), max_size=30))
def test_entries_equal_entry_one_by_one(rows: list[tuple[bytes, int, int]]) -> None:
    prefixes = [p for p, _, _ in rows]
    ts = np.array([t for _, t, _ in rows], dtype=np.int64)
    seqs = np.array([s for _, _, s in rows], dtype=np.uint64)
    assert entries(prefixes, ts, seqs) == [entry(p, t, s) for p, t, s in rows]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6).flatmap(lambda w: st.lists(
    st.tuples(st.binary(min_size=w, max_size=w), TIMES, st.integers(0, 2**64 - 1)), max_size=30)))  # fmt: skip
def test_entries_of_prefixes_of_one_length_equal_entry_one_by_one(
    rows: list[tuple[bytes, int, int]],
) -> None:
    prefixes = [p for p, _, _ in rows]
    ts = np.array([t for _, t, _ in rows], dtype=np.int64)
    seqs = np.array([s for _, _, s in rows], dtype=np.uint64)
    assert entries(prefixes, ts, seqs) == [entry(p, t, s) for p, t, s in rows]


@given(st.lists(st.binary(max_size=3), max_size=20), st.data())
def test_prefixed_rows_are_each_prefix_then_its_records_bytes(
    prefixes: list[bytes], data: st.DataObject
) -> None:
    rows = np.zeros(len(prefixes), dtype=[("a", "u1"), ("b", "<i8")])
    rows["a"] = data.draw(st.lists(st.integers(0, 255), min_size=len(prefixes),
                                   max_size=len(prefixes)))  # fmt: skip
    rows["b"] = data.draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=len(prefixes),
                                   max_size=len(prefixes)))  # fmt: skip
    one_by_one = [rows[i : i + 1].tobytes() for i in range(len(prefixes))]
    assert row_bytes(rows) == one_by_one
    assert row_bytes(rows[::2]) == one_by_one[::2]  # not contiguous
    assert prefixed(prefixes, rows) == [p + r for p, r in zip(prefixes, one_by_one, strict=True)]
    same = [(p + b"\0\0\0")[:3] for p in prefixes]  # one length, NULs at the end
    assert prefixed(same, rows) == [p + r for p, r in zip(same, one_by_one, strict=True)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=4), TIMES), max_size=30),
       st.sampled_from([1, 2_000_000, 64_000_000, 2**40]))  # fmt: skip
def test_tile_keys_equal_tile_key_one_by_one(rows: list[tuple[bytes, int]], size: int) -> None:
    idx = np.array([i for _, i in rows], dtype=np.int64)
    got = tile_keys([p for p, _ in rows], size, idx)
    assert got == [tile_key(p, size, i) for p, i in rows]


def _one_by_one(new: list[tuple[int, int, int]], held: list[tuple[int, int, int]]) -> list[int]:
    taken: dict[tuple[int, int], set[int]] = {}
    for k, t, s in held:
        taken.setdefault((k, t), set()).add(s)
    out = []
    for k, t, b in new:
        mine = taken.setdefault((k, t), set())
        seq = first_free(b, mine)
        mine.add(seq)
        out.append(seq)
    return out


# few keys, instants and sequences, so identical events and taken sequences are common
SMALL = st.tuples(st.integers(0, 2), st.integers(-2, 2), st.integers(0, 4))


@settings(max_examples=300, deadline=None)
@given(st.lists(SMALL, max_size=25), st.lists(SMALL, max_size=10, unique=True))
def test_free_seqs_equal_first_free_in_order(
    new: list[tuple[int, int, int]], held: list[tuple[int, int, int]]
) -> None:
    def cols(rows: list[tuple[int, int, int]]) -> tuple[np.ndarray, ...]:
        return (np.array([r[0] for r in rows], dtype=np.int64),
                np.array([r[1] for r in rows], dtype=np.int64),
                np.array([r[2] for r in rows], dtype=np.uint64))  # fmt: skip

    kid, ts, _ = cols(new)
    got = free_seqs(kid, ts, [b for _, _, b in new], cols(held))
    assert got == _one_by_one(new, held)


def test_a_repeat_of_a_held_event_takes_the_next_sequence() -> None:
    held = (np.array([1], np.int64), np.array([5], np.int64), np.array([9], np.uint64))
    kid, ts = np.array([1, 1, 2], np.int64), np.array([5, 5, 5], np.int64)
    assert free_seqs(kid, ts, [9, 9, 9], held) == [10, 11, 9]
