"""Request sensors' cursors name the schema and its incarnation (no stack needed)."""

from __future__ import annotations

from sensors import last_launched, request_cursor


def test_a_cursor_resumes_only_for_the_same_incarnation_of_the_same_schema() -> None:
    cursor = request_cursor("fennel", "1700000000000", 7)
    assert last_launched(cursor, "fennel", "1700000000000") == 7
    # the schema dropped and made again: its request ids start over, so does the sensor
    assert last_launched(cursor, "fennel", "1800000000000") == 0
    assert last_launched(cursor, "other", "1700000000000") == 0
    assert last_launched(None, "fennel", "1700000000000") == 0
    assert last_launched("fennel:7", "fennel", "1700000000000") == 0  # an older cursor form
