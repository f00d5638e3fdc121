"""A commit holds every entity its features copy or look up, as Fennel requires: a feature
``F(Other.f)`` needs featureset ``Other`` in the commit, and ``F(Dataset.field)`` needs the
dataset (Fennel's client test ``test_complex_auto_gen_extractors``). A python extractor's
input from a featureset outside the commit stays allowed: a query gives it."""

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


def test_a_copied_feature_needs_its_featureset_in_the_commit() -> None:
    client = MockClient()
    with pytest.raises(CommitRejected) as e:
        client.commit("c", datasets=[Riders], featuresets=[Copy, Looked])
    assert "featureset Request is not in the commit" in str(e.value)
    assert "Copy" in str(e.value)
    with pytest.raises(CommitRejected) as e:
        client.commit("c", datasets=[Riders], featuresets=[Request, Looked])
    assert "featureset Copy is not in the commit" in str(e.value)


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
