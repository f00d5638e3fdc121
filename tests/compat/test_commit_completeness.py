"""A commit holds what its shipped code needs, as Fennel requires: a featureset whose code
ships (it has a Python extractor) needs the featuresets its ``F(Other.f)`` copies name, and
theirs in turn (Fennel's client test ``test_complex_auto_gen_extractors``); ``F(Dataset.field)``
needs the dataset. A featureset of copies and lookups only ships no code, so it may copy
from a featureset outside the commit (Fennel's example ``featuresets/reading_datasets.py``),
and a python extractor's input from a featureset outside the commit stays allowed: a query
gives it."""

from __future__ import annotations

from datetime import datetime

import pandas as pd
import pytest

from fennel_dagster import dataset, extractor, feature, featureset, field, inputs, outputs
from fennel_dagster.commit.errors import CommitRejected
from fennel_dagster.mock import MockClient
from fennel_dagster.sources import Webhook, source

__owner__ = "compat@example.com"

HOOK = Webhook(name="complete_hook")


@source(HOOK.endpoint("Riders"), disorder="14d", cdc="upsert")
@dataset(index=True)
class Riders:
    rider_id: int = field(key=True)
    trips: int
    ts: datetime


@featureset
class Request:
    rider_id: int


@featureset
class Copy:
    rid: int = feature(Request.rider_id)  # type: ignore[assignment]


@featureset
class Looked:
    rider_id: int = feature(Copy.rid)  # type: ignore[assignment]
    trips: int = feature(Riders.trips, default=0)  # type: ignore[assignment]


@featureset
class Given:
    rider_id: int
    double: int

    @extractor
    @inputs(Request.rider_id)
    @outputs("double")
    def twice(cls, ts: pd.Series, rid: pd.Series) -> pd.DataFrame:  # type: ignore[no-untyped-def]
        return pd.DataFrame({"double": rid * 2})


@featureset
class Shipped:
    rid: int = feature(Copy.rid)  # type: ignore[assignment]
    double: int

    @extractor
    @inputs("rid")
    @outputs("double")
    def twice(cls, ts: pd.Series, rid: pd.Series) -> pd.DataFrame:  # type: ignore[no-untyped-def]
        return pd.DataFrame({"double": rid * 2})


def test_a_shipped_featureset_needs_the_featuresets_its_copies_name() -> None:
    client = MockClient()
    with pytest.raises(CommitRejected) as e:  # Shipped -> Copy -> Request, Request missing
        client.commit("c", datasets=[Riders], featuresets=[Copy, Shipped])
    assert str(e.value) == (
        "Featureset `Request` is required by `Copy` but is not present in the sync call. "
        "Please ensure that all featuresets are present in the sync call."
    )
    assert "add Request to the commit" in (e.value.hint or "")
    with pytest.raises(CommitRejected, match="Featureset `Copy` is required by `Shipped`"):
        client.commit("c", datasets=[Riders], featuresets=[Request, Shipped])
    client.commit("c", datasets=[Riders], featuresets=[Request, Copy, Shipped])


def test_copies_alone_may_name_a_featureset_outside_the_commit() -> None:
    client = MockClient()
    client.commit("c", datasets=[Riders], featuresets=[Copy, Looked])  # no code ships
    client.log("complete_hook", "Riders", pd.DataFrame(
        {"rider_id": [7], "trips": [3], "ts": [datetime(2024, 1, 1)]}))  # fmt: skip
    out = client.query(
        inputs=["Request.rider_id"],
        outputs=["Looked.trips"],
        input_dataframe=pd.DataFrame({"Request.rider_id": [7, 8]}),
    )
    assert out["Looked.trips"].tolist() == [3, 0]


def test_a_looked_up_field_needs_its_dataset_in_the_commit() -> None:
    client = MockClient()
    with pytest.raises(CommitRejected) as e:
        client.commit("c", datasets=[], featuresets=[Request, Copy, Looked])
    assert str(e.value) == "Dataset `Riders` not found in sync call"  # Fennel's words
    assert "dataset Riders, which is not in the commit" in (e.value.hint or "")


def test_a_complete_commit_answers_and_an_extractor_input_may_come_from_the_query() -> None:
    client = MockClient()
    client.commit("c", datasets=[Riders], featuresets=[Request, Copy, Looked])
    client.log("complete_hook", "Riders", pd.DataFrame(
        {"rider_id": [7], "trips": [3], "ts": [datetime(2024, 1, 1)]}))  # fmt: skip
    out = client.query(
        inputs=["Request.rider_id"],
        outputs=["Looked.rider_id", "Looked.trips"],
        input_dataframe=pd.DataFrame({"Request.rider_id": [7, 8]}),
    )
    assert out["Looked.trips"].tolist() == [3, 0]
    other = MockClient()
    other.commit("c", datasets=[], featuresets=[Given])  # Request is not committed
    out = other.query(
        inputs=["Request.rider_id"],
        outputs=["Given.double"],
        input_dataframe=pd.DataFrame({"Request.rider_id": [2]}),
    )
    assert out["Given.double"].tolist() == [4]
