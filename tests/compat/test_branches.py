"""Branches as Fennel's client tests use them: a webhook's rows reach every branch whose
datasets source from it (the platform's source jobs all read the webhook's inbox), while each
branch keeps its own definitions; a dataset built by a factory ships the lambda passed in."""

from datetime import UTC, datetime
from typing import Any

import pandas as pd

from fennel_dagster import Dataset, dataset, field, inputs, pipeline
from fennel_dagster.aggregate import Count
from fennel_dagster.dtypes import Continuous
from fennel_dagster.mock import MockClient
from fennel_dagster.sources import Webhook, source

__owner__ = "compat@example.com"

WEBHOOK = Webhook(name="fennel_webhook")
T0 = datetime(2024, 1, 1, tzinfo=UTC)


@source(WEBHOOK.endpoint("People"), disorder="14d", cdc="upsert")
@dataset(index=True)
class People:
    uid: int = field(key=True)
    gender: str
    ts: datetime


def by_gender(keep: Any, version: int) -> type:
    @dataset(index=True, version=version)
    class ByGender:
        gender: str = field(key=True)
        count: int
        ts: datetime

        @pipeline
        @inputs(People)
        def counted(cls, people: Dataset):
            return (
                people.filter(keep)
                .groupby("gender")
                .aggregate(count=Count(window=Continuous("forever")))
            )

    return ByGender


def test_webhook_rows_reach_every_branch_through_each_branchs_own_pipelines() -> None:
    client = MockClient()
    client.commit("v1", datasets=[People, by_gender(lambda df: df["gender"] != "", 1)])
    client.clone_branch("picky")
    client.commit("v2", datasets=[People, by_gender(lambda df: df["gender"] == "F", 2)])
    rows = pd.DataFrame({"uid": [1, 2, 3], "gender": ["F", "M", "F"], "ts": [T0] * 3})
    client.log("fennel_webhook", "People", rows)

    keys = pd.DataFrame({"gender": ["F", "M"]})
    counts, found = client.lookup("ByGender", keys=keys)
    assert client.branch == "picky" and found.tolist() == [True, False]
    assert counts["count"].tolist()[0] == 2
    client.checkout("main")
    counts, found = client.lookup("ByGender", keys=keys)
    assert found.tolist() == [True, True] and counts["count"].tolist() == [2, 1]


def test_clone_branch_takes_from_name_as_fennels_reference_names_it() -> None:
    client = MockClient()
    client.commit("v1", datasets=[People])
    client.init_branch("empty")
    client.clone_branch("copy", from_name="main")  # not the checked-out "empty"
    assert client.branch == "copy"
    assert [d.name for d in client.get_datasets()] == ["People"]
