"""Lookup keys are cast to their fields' types alike on every client: the mock and
``LocalClient`` through ``query.lookup.as_key_types``, the query server through
``serve.rest.coerced_keys`` (the same cast on JSON values)."""

from __future__ import annotations

import pandas as pd
import pytest

from fennel_dagster.query.lookup import as_key_types
from fennel_dagster.serve.frames import BadRequest, frame
from fennel_dagster.serve.rest import coerced_keys
from fennel_dagster.wire import spec

TYPES: dict[str, spec.DType] = {"s": spec.StringType(), "i": spec.IntType(),
                                "t": spec.TimestampType()}  # fmt: skip


def test_ints_for_a_str_key_are_cast_as_the_mock_casts_them() -> None:
    got = coerced_keys({"s": [1, 22], "i": [3, 4]}, TYPES)
    assert got == {"s": ["1", "22"], "i": [3, 4]}
    want = as_key_types(pd.DataFrame({"s": [1, 22], "i": [3, 4]}), TYPES)
    assert got["s"] == want["s"].tolist()


def test_what_does_not_cast_or_is_null_is_refused_naming_the_field() -> None:
    for data in ({"i": ["x", "2"]}, {"i": [1, None]}, {"s": ["a", None]}):
        with pytest.raises(BadRequest, match=f"^{next(iter(data))}: "):
            frame(coerced_keys(data, TYPES), TYPES, "keys")


def test_epoch_milliseconds_for_a_datetime_key_stay_milliseconds() -> None:
    keys = frame(coerced_keys({"t": [1_700_000_000_000]}, TYPES), TYPES, "keys")
    assert keys["t"].tolist() == [pd.Timestamp(1_700_000_000_000, unit="ms", tz="UTC")]
