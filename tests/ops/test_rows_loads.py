"""``rows.loads`` reads with orjson where it can: it must give exactly what the standard
library gives for everything ``dumps`` writes (ints of any size, NaN and Infinity, lone
surrogates, nested values), types included."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from fennel_dagster.ops.rows import dumps, loads

scalars = (
    st.none() | st.booleans() | st.integers() | st.integers(-(2**70), 2**70)
    | st.floats() | st.text()
)  # fmt: skip
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(st.text(max_size=6), values, max_size=6))
def test_loads_reads_what_the_standard_library_reads(row: dict) -> None:
    raw = dumps(row)
    # repr: 2**64 and 2.0**64 are equal in Python, but not the same value in a row
    assert repr(loads(raw)) == repr(json.loads(raw))
