"""Fennel's API as Fennel's own client tests use it (``fennel/client_tests``, run with only
their imports changed by ``tools/fennel_compat.py --examples fennel/client_tests``): the
vendored ``requests``, the mock's test hooks, ``explode(columns=...)``, ``aggregate([...])``
and ``bucketize``."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal as PyDecimal

import pandas as pd
import pytest

from fennel_dagster import dataset, extractor, feature, featureset, field, inputs, outputs, pipeline
from fennel_dagster.aggregate import Avg, Count, Max, Min, Quantile, Stddev, Sum
from fennel_dagster.declare.errors import DeclarationError
from fennel_dagster.dtypes import Continuous, Decimal, Embedding, Hopping, Tumbling, Window
from fennel_dagster.expr import lit
from fennel_dagster.lib import bucketize, includes
from fennel_dagster.mock import MockClient
from fennel_dagster.sources import Webhook, source

__owner__ = "compat@example.com"

WEBHOOK = Webhook(name="fennel_webhook")
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def test_the_vendored_requests_is_the_requests_package_and_log_answers_its_codes() -> None:
    import fennel_dagster._vendor.requests as vendored

    from fennel_dagster._vendor import requests

    assert vendored is requests
    assert requests.codes.OK == 200

    @source(WEBHOOK.endpoint("Ping"), disorder="1d", cdc="append")
    @dataset
    class Ping:
        uid: int
        ts: datetime

    client = MockClient()
    client.commit("v1", datasets=[Ping])
    response = client.log("fennel_webhook", "Ping", pd.DataFrame({"uid": [1], "ts": [T0]}))
    assert response.status_code == requests.codes.OK, response.json()


def test_the_mock_answers_fennels_test_hooks() -> None:
    from fennel_dagster import connectors
    from fennel_dagster.mock import almost_equal

    client = MockClient()
    assert client.is_integration_client() is False
    assert client.integration_mode() == "mock"
    assert client.sleep() is None and client.sleep(5) is None  # caught up when log returns
    assert connectors.Webhook is Webhook  # ``from fennel import connectors``
    assert almost_equal(0.1 + 0.2, 0.3) and almost_equal(float("nan"), float("nan"))
    assert not almost_equal(1.0, 1.001) and not almost_equal(1.0, float("nan"))


def test_explode_and_rename_by_keyword_and_aggregations_as_one_list() -> None:
    @source(WEBHOOK.endpoint("Basket"), disorder="1d", cdc="append")
    @dataset
    class Basket:
        uid: int
        items: list[int]
        ts: datetime

    @dataset(index=True)
    class Spend:
        uid: int = field(key=True)
        n: int
        total: int
        ts: datetime

        @pipeline
        @inputs(Basket)
        def agg(cls, b):  # type: ignore[no-untyped-def]
            rows = b.explode(columns=["items"]).dropnull("items")
            rows = rows.rename(columns={"items": "item"})
            n = Count(window=Continuous("forever"), into_field="n")
            total = Sum(of="item", window=Continuous("forever"), into_field="total")
            return rows.groupby("uid").aggregate([n, total])

    client = MockClient()
    client.commit("v1", datasets=[Basket, Spend])
    client.log("fennel_webhook", "Basket", pd.DataFrame(
        {"uid": [1, 2, 1], "items": [[1, 2], [5], [3]], "ts": [T0, T0, T0 + timedelta(1)]}
    ))  # fmt: skip
    got, found = client.lookup("Spend", keys=pd.DataFrame({"uid": [1, 2, 3]}))
    assert found.tolist() == [True, True, False]
    assert got["n"].tolist()[:2] == [3, 1]  # one row per exploded item
    assert got["total"].tolist()[:2] == [6, 5]


def _fennels_bucket(ts: datetime, size: int, stride: int) -> tuple[int, int]:
    """Fennel's rule, as its helper walks it: from the window holding ``ts``, step back a
    stride at a time until the window has ended (whole seconds)."""
    now = int(ts.timestamp())
    start = ((now - size) // stride + 1) * stride
    end = start + size
    while end > now:
        start, end = start - stride, end - stride
    return start, end


def test_bucketize_gives_the_window_that_ended_last_as_fennels_rule_does() -> None:
    rng = random.Random(7)
    for _ in range(3000):
        size = rng.choice([10, 60, 3600, 86400])
        stride = rng.choice([s for s in (1, 3, 7, 10, 60, 3600, 86400) if s <= size])
        at = T0 + timedelta(seconds=rng.uniform(-1e8, 1e8))
        spelled = [Hopping(f"{size}s", f"{stride}s"), (f"{size}s", f"{stride}s")]
        if size == stride:
            spelled += [Tumbling(f"{size}s"), f"{size}s"]
        want = _fennels_bucket(at, size, stride)
        for window in spelled:
            got = bucketize(at, window)
            assert isinstance(got, Window)
            assert (int(got.begin.timestamp()), int(got.end.timestamp())) == want, (at, window)
    # a naive time is UTC; a window that ends at the time itself has ended
    assert bucketize(datetime(2023, 1, 16, 11, 0, 10), "10s") == Window(
        begin=datetime(2023, 1, 16, 11, 0, 0, tzinfo=UTC),
        end=datetime(2023, 1, 16, 11, 0, 10, tzinfo=UTC),
    )
    with pytest.raises(DeclarationError, match="bucketize"):
        bucketize(T0, 10)  # type: ignore[arg-type]


def test_commit_and_branch_calls_answer_as_responses_and_branch_is_also_a_method() -> None:
    @source(WEBHOOK.endpoint("Seen"), disorder="1d", cdc="append")
    @dataset
    class Seen:
        uid: int
        ts: datetime

    client = MockClient()
    committed = client.commit("v1", datasets=[Seen])
    assert committed.status_code == 200 and committed.ok
    assert committed.commit is not None and [d.name for d in committed.commit.datasets] == ["Seen"]
    assert client.clone_branch("dev", from_branch="main").status_code == 200
    assert client.branch == "dev" and client.branch() == "dev"  # ours, and Fennel's spelling
    assert client.checkout("main").status_code == 200 and client.branch() == "main"
    assert client.init_branch("empty").status_code == 200 and client.list_branches() == [
        "main", "dev", "empty"
    ]  # fmt: skip
    assert client.delete_branch("empty").json() == {"message": "deleted branch 'empty'"}
    assert client.branch() == "main"
    assert [d.name for d in client.get_datasets()] == ["Seen"] and client.get_featuresets() == []
    client.checkout("dev")
    assert client.get_datasets() == list(committed.commit.datasets)  # the clone's own copy


def test_changelog_by_delete_or_insert_flag_inspect_and_log_by_keyword() -> None:
    @source(WEBHOOK.endpoint("City"), disorder="1d", cdc="upsert")
    @dataset(index=True)
    class City:
        uid: int = field(key=True)
        city: str
        ts: datetime

    @dataset
    class Deletes:
        uid: int
        city: str
        deleted: bool
        ts: datetime

        @pipeline
        @inputs(City)
        def log(cls, c):  # type: ignore[no-untyped-def]
            return c.changelog(delete="deleted")

    @dataset
    class Inserts:
        uid: int
        city: str
        inserted: bool
        ts: datetime

        @pipeline
        @inputs(City)
        def log(cls, c):  # type: ignore[no-untyped-def]
            return c.changelog(insert="inserted")

    client = MockClient()
    client.commit("v1", datasets=[City, Deletes, Inserts])
    rows = pd.DataFrame({"uid": [1, 2, 1], "city": ["Paris", "Rome", "Lyon"],
                         "ts": [T0, T0 + timedelta(minutes=1), T0 + timedelta(minutes=5)]})  # fmt: skip
    client.log(webhook="fennel_webhook", endpoint="City", df=rows)  # Fennel's keyword names
    deletes = client.get_dataset_df("Deletes")
    inserts = client.get_dataset_df("Inserts")
    want = [("Paris", False), ("Rome", False), ("Paris", True), ("Lyon", False)]
    assert list(zip(deletes["city"], deletes["deleted"], strict=True)) == want
    assert list(zip(inserts["city"], inserts["inserted"], strict=True)) == [
        (c, not d) for c, d in want
    ]
    assert inserts["inserted"].dtype == deletes["deleted"].dtype  # the same typed column
    newest = client.inspect("Deletes", n=2)
    assert list(newest["city"]) == ["Paris", "Lyon"]  # the newest two rows
    assert len(client.inspect(Deletes)) == 4  # fewer than n: all of them
    with pytest.raises(DeclarationError, match="name the flag column once"):

        @dataset
        class Both:
            uid: int
            city: str
            deleted: bool
            ts: datetime

            @pipeline
            @inputs(City)
            def log(cls, c):  # type: ignore[no-untyped-def]
                return c.changelog(delete="deleted", insert="deleted")


def test_epoch_seconds_log_as_the_same_times_as_iso_text() -> None:
    @source(WEBHOOK.endpoint("Stamp"), disorder="1000d", cdc="append")
    @dataset
    class Stamp:
        uid: int
        ts: datetime

    client = MockClient()
    client.commit("v1", datasets=[Stamp])
    epoch = int(T0.timestamp())
    assert client.log("fennel_webhook", "Stamp", pd.DataFrame(
        {"uid": [1, 2], "ts": [epoch, epoch + 90]}
    )).status_code == 200  # fmt: skip
    client.log("fennel_webhook", "Stamp", pd.DataFrame({"uid": [3], "ts": [T0.isoformat()]}))
    got = client.get_dataset_df("Stamp").sort_values("uid")
    assert got["ts"].tolist() == [T0, T0 + timedelta(seconds=90), T0]


def test_a_lookup_of_one_field_answers_its_column_as_fennels_clients_do() -> None:
    @source(WEBHOOK.endpoint("Person"), disorder="1d", cdc="upsert")
    @dataset(index=True)
    class Person:
        uid: int = field(key=True)
        name: str
        age: int
        ts: datetime

    client = MockClient()
    client.commit("v1", datasets=[Person])
    client.log("fennel_webhook", "Person", pd.DataFrame(
        {"uid": [1, 2], "name": ["Ross", "Monica"], "age": [30, 29], "ts": [T0, T0]}
    ))  # fmt: skip
    keys = pd.DataFrame({"uid": [2, 9]})
    name, found = client.lookup("Person", keys=keys, fields=["name"])
    assert isinstance(name, pd.Series) and name.name == "name"
    assert name.tolist()[0] == "Monica" and found.tolist() == [True, False]
    both, _ = client.lookup("Person", keys=keys, fields=["name", "age"])
    assert isinstance(both, pd.DataFrame) and list(both.columns) == ["name", "age"]
    whole, _ = client.lookup("Person", keys=keys)
    assert isinstance(whole, pd.DataFrame) and "uid" in whole.columns


def test_missing_values_answer_as_pd_na_in_fennels_nullable_dtypes() -> None:
    @source(WEBHOOK.endpoint("Profile"), disorder="1d", cdc="upsert")
    @dataset(index=True)
    class Profile:
        uid: int = field(key=True)
        city: str | None
        score: float | None
        visits: int | None
        tags: list[str | None]
        ts: datetime

    client = MockClient()
    client.commit("v1", datasets=[Profile])
    client.log("fennel_webhook", "Profile", pd.DataFrame({
        "uid": [1, 2], "city": ["Oslo", None], "score": [0.5, None], "visits": [3, None],
        "tags": [["a", None], []], "ts": [T0, T0],
    }))  # fmt: skip
    df, found = client.lookup("Profile", keys=pd.DataFrame({"uid": [1, 2, 3]}))
    assert found.tolist() == [True, True, False]
    assert df["city"].tolist() == ["Oslo", pd.NA, pd.NA]
    assert str(df["city"].dtype) == "string" and str(df["score"].dtype) == "Float64"
    assert df["score"].tolist() == [0.5, pd.NA, pd.NA]
    assert df["visits"].tolist() == [3, pd.NA, pd.NA]
    assert df["tags"].tolist() == [["a", pd.NA], [], pd.NA]


def test_a_transform_without_a_schema_keeps_its_inputs_fields() -> None:
    """Fennel's ``transform(fn)``: the output has the input's fields."""

    @source(WEBHOOK.endpoint("Raw"), disorder="1d", cdc="append")
    @dataset
    class Raw:
        uid: int
        amount: int
        ts: datetime

    @dataset
    class Doubled:
        uid: int
        amount: int
        ts: datetime

        @pipeline
        @inputs(Raw)
        def double(cls, raw):
            return raw.transform(lambda df: df.assign(amount=df["amount"] * 2))

    client = MockClient()
    client.commit("v1", datasets=[Raw, Doubled])
    client.log("fennel_webhook", "Raw", pd.DataFrame({"uid": [1], "amount": [4], "ts": [T0]}))
    assert client.get_dataset_df("Doubled")["amount"].tolist() == [8]


def test_decimal_amounts_aggregate_to_decimals_at_their_scale() -> None:
    """Sum, Min and Max of a Decimal[2] give Decimal[2] (0.10 + 0.20 is 0.30, not the float
    sum's 0.30000000000000004); Average, Stddev and Quantile a float, as in Fennel."""

    @source(WEBHOOK.endpoint("Payment"), disorder="1d", cdc="append")
    @dataset
    class Payment:
        uid: int
        amount: Decimal[2]
        ts: datetime

    @dataset(index=True)
    class Spend:
        uid: int = field(key=True)
        total: Decimal[2]
        low: Decimal[2]
        high: Decimal[2]
        mean: float
        median: float
        ts: datetime

        @pipeline
        @inputs(Payment)
        def spend(cls, payment):
            return payment.groupby("uid").aggregate(
                total=Sum(of="amount", window=Continuous("forever")),
                low=Min(of="amount", window=Continuous("forever"), default=0.0),
                high=Max(of="amount", window=Continuous("forever"), default=0.0),
                mean=Avg(of="amount", window=Continuous("forever")),
                median=Quantile(of="amount", p=0.5, window=Continuous("forever"), default=0.0),
            )

    client = MockClient()
    client.commit("v1", datasets=[Payment, Spend])
    amounts = [PyDecimal("0.10"), PyDecimal("0.20"), PyDecimal("1000000.07")]
    client.log("fennel_webhook", "Payment", pd.DataFrame(
        {"uid": [1, 1, 1], "amount": amounts, "ts": [T0, T0 + timedelta(seconds=1), T0]}
    ))  # fmt: skip
    at = pd.Series([T0 + timedelta(seconds=1), T0])
    df, found = client.lookup("Spend", keys=pd.DataFrame({"uid": [1, 1]}), timestamps=at)
    assert found.tolist() == [True, True]
    assert df["total"].tolist() == [PyDecimal("1000000.37"), PyDecimal("1000000.17")]
    assert df["low"].tolist() == [PyDecimal("0.10"), PyDecimal("0.10")]
    assert df["high"].tolist() == [PyDecimal("1000000.07")] * 2
    assert df["mean"].tolist() == pytest.approx([1000000.37 / 3, 1000000.17 / 2])
    assert df["median"].tolist() == pytest.approx([0.20, 1000000.07])


def test_a_lookup_keyed_by_a_list_answers_a_list() -> None:
    """Fennel's list lookup: a feature keyed by ``List[int]`` looks up every element at its
    row's time; missing ones are pd.NA, or the feature's default."""

    @source(WEBHOOK.endpoint("Member"), disorder="1d", cdc="upsert")
    @dataset(index=True)
    class Member:
        uid: int = field(key=True)
        name: str
        country: str | None
        ts: datetime

    @featureset
    class Crew:
        uid: list[int]
        names: list[str] = feature(Member.name, default="Unknown")
        countries: list[str | None] = feature(Member.country)

    client = MockClient()
    client.commit("v1", datasets=[Member], featuresets=[Crew])
    client.log("fennel_webhook", "Member", pd.DataFrame(
        {"uid": [1, 2], "name": ["Ann", "Bo"], "country": ["NO", None], "ts": [T0, T0]}
    ))  # fmt: skip
    out = client.query(
        outputs=[Crew.names, Crew.countries], inputs=[Crew.uid],
        input_dataframe=pd.DataFrame({"Crew.uid": [[1, 2, 3], [], [2]]}),
    )  # fmt: skip
    assert out["Crew.names"].tolist() == [["Ann", "Bo", "Unknown"], [], ["Bo"]]
    assert out["Crew.countries"].tolist() == [["NO", pd.NA, pd.NA], [], [pd.NA]]


def test_an_extractor_called_directly_names_its_columns_as_fennels_do() -> None:
    """Fennel's unit tests call an extractor on the class: ``Fs.fn(Fs.original_cls, ts,
    *series)``; its outputs come back named by feature, ``Fs.all()`` lists the features,
    and a method of the featureset is there for ``cls.`` (as it is where extractors run)."""

    @featureset
    class Ages:
        age: int
        doubled: int
        common: bool

        @extractor
        @inputs("age")
        @outputs("doubled", "common")
        def double(cls, ts: pd.Series, age: pd.Series):
            assert age.name == "Ages.age"
            return pd.DataFrame({"doubled": age * 2, "common": age.isin(cls.usual())})

        @classmethod
        def usual(cls) -> list[int]:
            return [30]

    assert Ages.all() == ["Ages.age", "Ages.doubled", "Ages.common"]
    ts = pd.Series([T0, T0])
    out = Ages.double(Ages.original_cls, ts, pd.Series([30, 4]))
    assert out["Ages.doubled"].tolist() == [60, 8] and out["Ages.common"].tolist() == [True, False]
    client = MockClient()
    client.commit("v1", datasets=[], featuresets=[Ages])
    got = client.query(outputs=[Ages.common], inputs=[Ages.age],
                       input_dataframe=pd.DataFrame({"Ages.age": [30, 4]}))  # fmt: skip
    assert got["Ages.common"].tolist() == [True, False]


def test_a_list_default_fills_a_missing_embedding_whole() -> None:
    @source(WEBHOOK.endpoint("Image"), disorder="1d", cdc="upsert")
    @dataset(index=True)
    class Image:
        image_id: int = field(key=True)
        embedding: Embedding[2]
        ts: datetime

    @featureset
    class Pic:
        image_id: int
        embedding: Embedding[2] = feature(Image.embedding, default=[11.0, 13.2])

    client = MockClient()
    client.commit("v1", datasets=[Image], featuresets=[Pic])
    client.log("fennel_webhook", "Image", pd.DataFrame(
        {"image_id": [1], "embedding": [[1.0, 2.0]], "ts": [T0]}
    ))  # fmt: skip
    got = client.query(outputs=[Pic.embedding], inputs=[Pic.image_id],
                       input_dataframe=pd.DataFrame({"Pic.image_id": [1, 4]}))  # fmt: skip
    assert got["Pic.embedding"].tolist() == [[1.0, 2.0], [11.0, 13.2]]


def test_min_and_max_of_dates_and_datetimes_answer_their_type() -> None:
    """Min/Max of a date and of a datetime, queried through a featureset with defaults for a
    country never seen, as Fennel's ``test_complex_min_max`` does."""

    @source(WEBHOOK.endpoint("People"), disorder="14d", cdc="append")
    @dataset
    class People:
        uid: int
        birthdate: date
        birthtime: datetime
        country: str
        ts: datetime = field(timestamp=True)

    @dataset(index=True)
    class Births:
        country: str = field(key=True)
        min_birthdate: date
        max_birthdate: date
        min_birthtime: datetime
        max_birthtime: datetime
        ts: datetime = field(timestamp=True)

        @pipeline
        @inputs(People)
        def births(cls, people):
            return people.groupby("country").aggregate(
                min_birthdate=Min(of="birthdate", window=Continuous("forever"),
                                  default=date(1970, 1, 1)),
                max_birthdate=Max(of="birthdate", window=Continuous("forever"),
                                  default=date(1970, 1, 2)),
                min_birthtime=Min(of="birthtime", window=Continuous("forever"),
                                  default=datetime(1970, 1, 1, tzinfo=UTC)),
                max_birthtime=Max(of="birthtime", window=Continuous("forever"),
                                  default=datetime(1970, 1, 2, tzinfo=UTC)),
            )  # fmt: skip

    @featureset
    class CountryFeatures:
        country: str
        min_birthdate: date = feature(Births.min_birthdate, default=date(1970, 1, 1))
        max_birthdate: date = feature(Births.max_birthdate, default=date(1970, 1, 2))
        min_birthtime: datetime = feature(
            Births.min_birthtime, default=datetime(1970, 1, 1, tzinfo=UTC)
        )
        max_birthtime: datetime = feature(
            Births.max_birthtime, default=datetime(1970, 1, 2, tzinfo=UTC)
        )

    client = MockClient()
    client.commit("v1", datasets=[People, Births], featuresets=[CountryFeatures])
    days = [date(1980, 1, 1), date(1990, 2, 11), date(2000, 3, 15), date(1997, 5, 22),
            date(1987, 6, 6)]  # fmt: skip
    client.log("fennel_webhook", "People", pd.DataFrame({
        "uid": [1, 2, 3, 4, 5],
        "country": ["India", "USA", "India", "USA", "UK"],
        "birthdate": days,
        "birthtime": [datetime(d.year, d.month, d.day, 6, tzinfo=UTC) for d in days],
        "ts": [T0] * 5,
    }))  # fmt: skip
    df = client.query(
        inputs=[CountryFeatures.country], outputs=[CountryFeatures],
        input_dataframe=pd.DataFrame({"CountryFeatures.country": ["India", "USA", "UK", "China"]}),
    )  # fmt: skip
    assert df["CountryFeatures.min_birthdate"].tolist() == [
        date(1980, 1, 1), date(1990, 2, 11), date(1987, 6, 6), date(1970, 1, 1)]  # fmt: skip
    assert df["CountryFeatures.max_birthdate"].tolist() == [
        date(2000, 3, 15), date(1997, 5, 22), date(1987, 6, 6), date(1970, 1, 2)]  # fmt: skip
    assert df["CountryFeatures.min_birthtime"].tolist() == [
        datetime(1980, 1, 1, 6, tzinfo=UTC), datetime(1990, 2, 11, 6, tzinfo=UTC),
        datetime(1987, 6, 6, 6, tzinfo=UTC), datetime(1970, 1, 1, tzinfo=UTC)]  # fmt: skip
    assert df["CountryFeatures.max_birthtime"].tolist() == [
        datetime(2000, 3, 15, 6, tzinfo=UTC), datetime(1997, 5, 22, 6, tzinfo=UTC),
        datetime(1987, 6, 6, 6, tzinfo=UTC), datetime(1970, 1, 2, tzinfo=UTC)]  # fmt: skip


def test_a_key_without_a_row_answers_the_aggregations_defaults_and_keys_are_cast() -> None:
    """As Fennel's lookups: a key never seen answers each Average, Quantile and Stddev its
    default (Stddev's is -1.0, Average's 0.0), Count and Sum null; a query's feature without
    a default of its own answers that default too; an int asked of a str key is its text."""

    @source(WEBHOOK.endpoint("Paid"), disorder="14d", cdc="append")
    @dataset
    class Paid:
        uid: int
        amount: float
        ts: datetime

    @dataset(index=True)
    class PaidStats:
        uid: int = field(key=True)
        tag: str = field(key=True)
        n: int
        mean: float
        spread: float
        median: float
        ts: datetime

        @pipeline
        @inputs(Paid)
        def stats(cls, paid):
            return (
                paid.assign(tag=lit("1").astype(str))
                .groupby("uid", "tag")
                .aggregate(
                    n=Count(window=Continuous("forever")),
                    mean=Avg(of="amount", window=Continuous("forever")),
                    spread=Stddev(of="amount", window=Continuous("10m")),
                    median=Quantile(of="amount", p=0.5, default=-1, window=Continuous("forever")),
                )
            )

    @featureset
    class PaidFeatures:
        uid: int
        tag: str
        median: float | None = feature(PaidStats.median)

    client = MockClient()
    client.commit("v1", datasets=[Paid, PaidStats], featuresets=[PaidFeatures])
    client.log("fennel_webhook", "Paid", pd.DataFrame(
        {"uid": [1, 1], "amount": [10.0, 30.0], "ts": [T0, T0]}
    ))  # fmt: skip
    at = pd.Series([T0 + timedelta(hours=1)] * 2)
    df, found = client.lookup(
        PaidStats, keys=pd.DataFrame({"uid": [1, 2], "tag": [1, 1]}), timestamps=at
    )
    assert found.tolist() == [True, False]
    assert df["tag"].tolist() == ["1", "1"]
    assert df["n"].tolist()[0] == 2 and df["n"].tolist()[1] is pd.NA
    assert df["mean"].tolist() == [20.0, 0.0]
    assert df["spread"].tolist() == [-1.0, -1.0]  # the 10 minutes hold no value at T0 + 1h
    out = client.query(
        inputs=[PaidFeatures.uid, PaidFeatures.tag], outputs=[PaidFeatures.median],
        input_dataframe=pd.DataFrame({"PaidFeatures.uid": [1, 2], "PaidFeatures.tag": ["1", "1"]}),
    )  # fmt: skip
    assert out["PaidFeatures.median"].tolist()[1] == -1.0


def _squared(x: pd.Series) -> pd.Series:
    return x**2


def test_a_pipelines_includes_reach_its_lambdas_and_a_helper_names_fields_by_cls() -> None:
    """As Fennel ships them: ``@includes`` on a pipeline goes with each of its lambdas, and a
    helper defined in the pipeline reads ``str(cls.field)`` where the code runs."""

    @source(WEBHOOK.endpoint("Rated"), disorder="14d", cdc="append")
    @dataset
    class Rated:
        movie: str
        rating: float
        ts: datetime

    @dataset
    class RatedSquared:
        movie: str
        rating_sq: float
        label: str
        ts: datetime

        @pipeline
        @includes(_squared)
        @inputs(Rated)
        def squared(cls, rated):
            def labelled(df: pd.DataFrame) -> pd.DataFrame:
                df[str(cls.label)] = df[str(cls.movie)].str.upper()
                return df[[str(cls.movie), str(cls.rating_sq), str(cls.label), "ts"]]

            sq = rated.assign("rating_sq", float, lambda df: _squared(df["rating"]))
            return sq.transform(labelled, schema={
                "movie": str, "rating_sq": float, "label": str, "ts": datetime,
            })  # fmt: skip

    client = MockClient()
    client.commit("v1", datasets=[Rated, RatedSquared])
    client.log("fennel_webhook", "Rated", pd.DataFrame(
        {"movie": ["a", "b"], "rating": [2.0, 3.0], "ts": [T0, T0]}
    ))  # fmt: skip
    rows = client.get_dataset_df("RatedSquared")
    assert rows["rating_sq"].tolist() == [4.0, 9.0]
    assert rows["label"].tolist() == ["A", "B"]


def test_an_int_logged_into_a_str_field_is_its_text() -> None:
    """As Fennel casts a logged frame to its schema: an id of 1 in a ``str`` field is "1"
    (the engine's source job does the same to a JSON int); a float there is still refused."""

    @source(WEBHOOK.endpoint("Tagged"), disorder="14d", cdc="upsert")
    @dataset(index=True)
    class Tagged:
        tag: str = field(key=True)
        note: str | None
        ts: datetime

    client = MockClient()
    client.commit("v1", datasets=[Tagged])
    client.log("fennel_webhook", "Tagged", pd.DataFrame(
        {"tag": [1, 22], "note": pd.Series([None, 5], dtype=object), "ts": [T0, T0]}
    ))  # fmt: skip
    df, found = client.lookup(Tagged, keys=pd.DataFrame({"tag": ["1", "22"]}))
    assert found.tolist() == [True, True]
    assert df["note"].tolist() == [pd.NA, "5"]
    with pytest.raises(Exception, match=r"Tagged.tag = 1.5 is not a str"):
        client.log("fennel_webhook", "Tagged", pd.DataFrame({"tag": [1.5], "note": [None],
                                                             "ts": [T0]}))  # fmt: skip


def test_epoch_numbers_are_read_in_the_unit_that_fits_as_fennel_reads_them() -> None:
    """Seconds, or milliseconds, microseconds and nanoseconds where seconds would pass 2262:
    the same instant whichever unit a client logs it in; the source job reads them alike
    (``ops.limits.parse_timestamp``)."""

    @source(WEBHOOK.endpoint("Ticks"), disorder="10000d", cdc="append")
    @dataset
    class Ticks:
        n: int
        ts: datetime

    client = MockClient()
    client.commit("v1", datasets=[Ticks])
    s = 1672858163
    client.log("fennel_webhook", "Ticks", pd.DataFrame(
        {"n": [0, 1, 2, 3], "ts": [s, s * 1000, s * 10**6, s * 10**9]}
    ))  # fmt: skip
    stamps = client.get_dataset_df("Ticks").sort_values("n")["ts"].tolist()
    assert stamps == [pd.Timestamp("2023-01-04T18:49:23Z")] * 4
