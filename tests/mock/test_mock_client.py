"""The MockClient runs the example repo end to end with the engine's operators."""

from __future__ import annotations

from datetime import datetime

import pandas as pd
import pytest

from examples.payments import DATASETS, FEATURESETS
from examples.payments.datasets import Merchant, Transaction, User, UserSpend
from examples.payments.events import generate
from fennel_dagster import (
    commit_spec,
    dataset,
    extractor,
    featureset,
    field,
    inputs,
    meta,
    outputs,
    source,
)
from fennel_dagster.api import MissingInputColumns
from fennel_dagster.commit.errors import CommitRejected
from fennel_dagster.dtypes import between
from fennel_dagster.mock import MockClient, mock
from fennel_dagster.mock.client import MockError
from fennel_dagster.query.execute import ExtractorError
from fennel_dagster.query.lookup import DatasetNotFound
from fennel_dagster.sources import Webhook

EVENTS = generate(n_users=20, n_merchants=8, n_transactions=400, days=10)


@pytest.fixture(scope="module")
def client() -> MockClient:
    c = MockClient()
    c.commit("v1", DATASETS, FEATURESETS)
    c.log(User, EVENTS.users)
    c.log("ops_webhook", "merchants", EVENTS.merchants)
    result = c.log(Transaction, EVENTS.transactions)
    assert result.accepted == len(EVENTS.transactions) and not result.errors
    return c


def reference_spend(uid: int, at: pd.Timestamp, days: int = 7) -> float:
    """Recompute spend_7d from the raw events with plain pandas (an independent oracle)."""
    rate = {"EUR": 1.0, "GBP": 1.17, "USD": 0.92}
    t = EVENTS.transactions
    mine = t[(t.uid == uid) & (t.ts >= at - pd.Timedelta(days=days)) & (t.ts <= at)]
    return float((mine.amount * mine.currency.map(rate)).sum())


def test_pipelines_run_downstream_in_dependency_order(client: MockClient) -> None:
    enriched = client.get_dataset_df("EnrichedTransaction")
    assert len(enriched) == len(EVENTS.transactions)
    assert enriched["category"].notna().all() and enriched["country"].notna().all()
    assert len(client.get_dataset_df(UserSpend)) == len(EVENTS.transactions)


def test_lookups_are_point_in_time_and_match_an_independent_recomputation(
    client: MockClient,
) -> None:
    times = [EVENTS.transactions.ts.iloc[i] for i in (50, 200, 399)]
    for at in times:
        uids = list(range(1, 21))
        df, found = client.lookup(
            UserSpend, pd.DataFrame({"uid": uids}), pd.Series([at] * len(uids))
        )
        for uid, got, hit in zip(uids, df["spend_7d"], found, strict=True):
            if hit:
                assert got == pytest.approx(reference_spend(uid, at))


def test_query_runs_lookup_expression_alias_and_python_extractors(client: MockClient) -> None:
    at = EVENTS.transactions.ts.max()
    inputs = pd.DataFrame({"UserFeatures.uid": [1, 2, 999], "TxnFeatures.uid": [1, 2, 999],
                           "TxnFeatures.merchant_id": [1, 2, 3], "TxnFeatures.amount": [10.0, 20.0, 30.0]})  # fmt: skip
    out = client.query(
        ["UserFeatures.uid", "TxnFeatures.uid", "TxnFeatures.merchant_id", "TxnFeatures.amount"],
        ["UserFeatures", "TxnFeatures.amount_vs_avg", "TxnFeatures.user_spend_7d"],
        inputs,
        timestamps=pd.Series([at] * 3),
    )
    assert out["UserFeatures.spend_7d"].tolist()[:2] == pytest.approx(
        [reference_spend(1, at), reference_spend(2, at)]
    )
    assert out["UserFeatures.spend_7d"].iloc[2] == 0.0  # unknown user: the feature's default
    assert out["UserFeatures.country"].iloc[2] == "unknown"
    assert (out["UserFeatures.is_heavy_spender"] == (out["UserFeatures.spend_7d"] > 1000)).all()
    assert out["TxnFeatures.user_spend_7d"].tolist() == out["UserFeatures.spend_7d"].tolist()
    age = (at - EVENTS.users.set_index("uid").loc[1, "signup_at"]).total_seconds() / 86400
    assert out["UserFeatures.account_age_days"].iloc[0] == pytest.approx(age)
    assert out["UserFeatures.account_age_days"].iloc[2] == -1.0


def test_offline_query_is_point_in_time_per_row(client: MockClient) -> None:
    early, late = EVENTS.transactions.ts.iloc[20], EVENTS.transactions.ts.iloc[399]
    rows = pd.DataFrame({"UserFeatures.uid": [3, 3], "ts": [early, late]})
    out = client.query_offline(["UserFeatures.uid"], ["UserFeatures.spend_7d"], rows, "ts")
    assert out["UserFeatures.spend_7d"].tolist() == pytest.approx(
        [reference_spend(3, early), reference_spend(3, late)]
    )


def test_upserts_replace_earlier_rows_as_of_their_time(client: MockClient) -> None:
    later = EVENTS.transactions.ts.max() + pd.Timedelta(days=1)
    moved = pd.DataFrame(
        {"merchant_id": [1], "category": ["travel-new"], "risk_tier": [3], "ts": [later]}
    )
    c = MockClient()
    c.commit("v1", DATASETS, FEATURESETS)
    c.log("ops_webhook", "merchants", EVENTS.merchants)
    c.log("ops_webhook", "merchants", moved)
    before, _ = c.lookup(
        Merchant, pd.DataFrame({"merchant_id": [1]}), pd.Series([later - pd.Timedelta(seconds=1)])
    )
    after, _ = c.lookup(Merchant, pd.DataFrame({"merchant_id": [1]}), pd.Series([later]))
    assert (
        before["category"].iloc[0] == EVENTS.merchants.set_index("merchant_id").loc[1, "category"]
    )
    assert after["category"].iloc[0] == "travel-new"


def test_rows_that_break_the_schema_are_rejected_with_the_field_and_value() -> None:
    c = MockClient()
    c.commit("v1", DATASETS, FEATURESETS)
    bad = EVENTS.transactions.head(2).copy()
    bad["currency"] = ["EUR", "JPY"]
    with pytest.raises(MockError) as e:
        c.log(Transaction, bad)
    assert str(e.value) == (  # Fennel's words (its users' tests compare them)...
        'Schema validation failed during data insertion to `Transaction` [ValueError("Field '
        "`currency` is of type oneof, but Value JPY is not in options ['EUR', 'GBP', 'USD'].\")]"
    )
    assert e.value.hint == (  # ... and ours, naming the row, in the hint
        "1 row(s) rejected by Transaction's schema; first: Transaction.currency = 'JPY' is "
        "not one of ['EUR', 'GBP', 'USD'] (declared oneof(str, ['EUR', 'GBP', 'USD']))"
    )


def test_a_value_that_does_not_cast_is_refused_in_fennels_words() -> None:
    @meta(owner="team@example.com")
    @source(Webhook(name="h").endpoint("people"), cdc="upsert", disorder="1d")
    @dataset(index=True)
    class People:
        uid: int = field(key=True)
        age: int | None
        score: between(int, 0, 10)  # type: ignore[valid-type]
        ts: datetime

    c = MockClient()
    c.commit("v1", [People])
    now = pd.Timestamp.now(tz="UTC")
    rows = pd.DataFrame({"uid": [1, 2], "age": ["32yrs", 24], "score": [1, 2], "ts": [now, now]})
    with pytest.raises(MockError) as e:
        c.log("h", "people", rows)
    assert str(e.value) == (
        "Schema validation failed during data insertion to `People`: Failed to cast data "
        "logged to column `age` of type `optional(int)`: Expected bytes, got a 'int' object"
    )
    assert "People.age = '32yrs' is not an int" in str(e.value.hint)
    rows = pd.DataFrame({"uid": [1, 2], "age": [3, 4], "score": [1, 12], "ts": [now, now]})
    with pytest.raises(MockError) as e:
        c.log("h", "people", rows)
    assert str(e.value) == (
        "Schema validation failed during data insertion to `People` [ValueError('Field "
        "`score` is of type between, but Value 12 is out of bounds for between type, bounds "
        "are [0, 10].')]"
    )


def test_query_errors_are_in_fennels_words(client: MockClient) -> None:
    with pytest.raises(MissingInputColumns) as e:  # the input rows are checked first
        client.query(["UserFeatures.uid"], ["NoSuchFeatureset"], pd.DataFrame({"uid": [1]}))
    assert str(e.value) == (
        "Input dataframe does not contain all the required features. Required features: "
        "['UserFeatures.uid']. Input dataframe columns: Index(['uid'], dtype='object')"
    )
    assert "UserFeatures.uid" in str(e.value.hint)
    with pytest.raises(DatasetNotFound) as nf:
        client.lookup("NoSuchDataset", pd.DataFrame({"uid": [1]}))
    assert str(nf.value) == "Dataset `NoSuchDataset` not found" and isinstance(nf.value, ValueError)


def test_commit_runs_validation_and_reports_every_error() -> None:
    @source(Webhook(name="h").endpoint("x"))
    @dataset
    class Ownerless:
        uid: int = field(key=True)
        ts: datetime

    with pytest.raises(CommitRejected, match="Ownerless: has no owner"):
        MockClient().commit("bad", [Ownerless])


@mock
def test_mock_decorator_hands_a_fresh_client(client: MockClient) -> None:
    assert client.datasets == {}
    committed = client.commit("v1", DATASETS, FEATURESETS, preview=True)
    assert committed.commit == commit_spec("v1", DATASETS, FEATURESETS) and client.datasets == {}
    assert committed.status_code == 200  # Fennel code checks the answer's status


def test_query_offline_takes_fennels_arguments_too(client: MockClient) -> None:
    """Fennel's ``query_offline(inputs, outputs, timestamp_column, input_dataframe=...,
    feature_to_column_map=...)`` gives what this mock's positional form gives."""
    early, late = EVENTS.transactions.ts.iloc[20], EVENTS.transactions.ts.iloc[399]
    rows = pd.DataFrame({"UserFeatures.uid": [3, 3, 999], "ts": [early, late, late]})
    want = client.query_offline(["UserFeatures.uid"], ["UserFeatures.spend_7d"], rows, "ts")
    fennel = client.query_offline(
        ["UserFeatures.uid"], ["UserFeatures.spend_7d"], "ts",
        input_dataframe=rows.rename(columns={"UserFeatures.uid": "user"}),
        feature_to_column_map={"UserFeatures.uid": "user"},
    )  # fmt: skip
    pd.testing.assert_frame_equal(fennel, want)
    assert want["UserFeatures.spend_7d"].tolist()[2] == 0.0
    with pytest.raises(MockError, match="no timestamp column 'at'"):
        client.query_offline(["UserFeatures.uid"], ["UserFeatures.spend_7d"], "at",
                             input_dataframe=rows)  # fmt: skip
    with pytest.raises(MockError, match="reads and writes no S3"):
        client.query_offline(["UserFeatures.uid"], ["UserFeatures.spend_7d"], "ts",
                             input_s3="s3://bucket/spine/")  # fmt: skip


def test_an_extractor_that_raises_is_reported_in_fennels_words() -> None:
    @meta(owner="team@example.com")
    @featureset
    class Broken:
        uid: int
        x: int

        @extractor
        @inputs("uid")
        @outputs("x")
        def compute(cls, ts: pd.Series, uid: pd.Series) -> pd.Series:
            raise NameError("name 'Missing' is not defined")

    c = MockClient()
    c.commit("v1", featuresets=[Broken])
    with pytest.raises(ExtractorError) as e:
        c.query(["Broken.uid"], ["Broken.x"], pd.DataFrame({"Broken.uid": [1]}))
    assert str(e.value) == (
        "Extractor `compute` in `Broken` failed to run with error: name 'Missing' is not defined. "
    )
    assert (
        e.value.hint == "extractor Broken.compute raised NameError: name 'Missing' is not defined"
    )
