"""``Source.locate`` by one int64 per (key, position) answers as the ranked search does,
bounds far outside the positions held included."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fennel_dagster.ops import tiles
from fennel_dagster.ops.aggregate.stats import Source

positions = st.one_of(
    st.integers(-50, 50), st.integers(1_700_000_000_000_000, 1_700_000_000_000_100)
)
bounds = st.one_of(positions, st.just(tiles.NEG_INF), st.just(2**62))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), positions), min_size=1, max_size=40),
       st.lists(st.tuples(st.integers(0, 6), bounds, bounds), min_size=1, max_size=20))  # fmt: skip
def test_flat_locate_equals_the_ranked_search(
    held: list[tuple[int, int]], queries: list[tuple[int, int, int]]
) -> None:
    held = sorted(held)
    src = Source(np.array([k for k, _ in held], np.int64), np.array([p for _, p in held], np.int64),
                 np.ones(len(held), np.int64))  # fmt: skip
    qk = np.array([q[0] for q in queries], np.int64)
    bs = [np.array([q[1] for q in queries], np.int64), np.array([q[2] for q in queries], np.int64)]
    flat = src._locate_flat(qk, bs)  # noqa: SLF001
    ranked = src._locate_ranked(qk, bs)  # noqa: SLF001
    if flat is None:  # the spread of times (µs since 1970 and near 0) times keys: too wide
        return
    assert [a.tolist() for a in flat] == [a.tolist() for a in ranked]


def test_the_flat_search_is_taken_for_a_batch_of_recent_events() -> None:
    pos = np.array([1_700_000_000_000_000 + i for i in range(0, 10_000, 7)], np.int64)
    keys = np.sort(np.arange(len(pos)) % 1000)
    src = Source(keys, np.sort(pos), np.ones(len(pos), np.int64))
    assert src._locate_flat(np.array([3]), [np.array([tiles.NEG_INF])]) is not None  # noqa: SLF001


@given(st.lists(st.tuples(st.integers(0, 6), bounds), max_size=10))
def test_nothing_held_locates_every_query_at_zero_as_the_ranked_search_does(
    queries: list[tuple[int, int]],
) -> None:
    empty = np.zeros(0, np.int64)
    src = Source(empty, empty, empty)
    qk = np.array([q[0] for q in queries], np.int64)
    bs = [np.array([q[1] for q in queries], np.int64)]
    assert [a.tolist() for a in src.locate(qk, bs)] == [
        a.tolist()
        for a in src._locate_ranked(qk, bs)  # noqa: SLF001
    ]
