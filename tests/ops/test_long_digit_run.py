"""The guard that keeps ints past int64 away from orjson (``rows.long_digit_run``) finds a
run of 19 ASCII digits exactly when a regular expression does."""

from __future__ import annotations

import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from fennel_dagster.engine.jobs.source_columns import parse
from fennel_dagster.engine.messages import InMessage
from fennel_dagster.ops.rows import loads, long_digit_run

# digits mostly, so runs of every length around 19 are common; and bytes past ASCII
BYTES = st.binary(max_size=80) | st.lists(
    st.sampled_from([*b"0123456789", *b"0123456789", *b".-e\n ", 0xD9, 0x30 + 0x80]),
    max_size=80,
).map(bytes)


@settings(max_examples=500, deadline=None)
@given(BYTES)
def test_finds_a_run_exactly_when_the_regular_expression_does(data: bytes) -> None:
    assert long_digit_run(data) == bool(re.search(rb"[0-9]{19}", data))


def test_ints_past_int64_keep_their_value_in_rows_and_send_a_batch_to_the_row_road() -> None:
    big = 2**64 + 1
    assert loads(json.dumps({"x": big}).encode()) == {"x": big}
    msg = InMessage(topic="t", partition=0, offset=0, key=None,
                    value=json.dumps({"uid": big}).encode(), timestamp_ms=0)  # fmt: skip
    assert parse([msg], 1 << 20) is None
    small = InMessage(topic="t", partition=0, offset=1, key=None,
                      value=json.dumps({"uid": 10**18 - 1, "f": 0.1234567890123456789}).encode(),
                      timestamp_ms=0)  # fmt: skip
    assert parse([small], 1 << 20) == [{"uid": 10**18 - 1, "f": 0.1234567890123456789}]
