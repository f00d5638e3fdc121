"""Fennel's API as its documentation uses it, on the MockClient (our own tests of each class
of difference the docs-examples run found; see docs/compat.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Optional

import pandas as pd
import pytest

from fennel_dagster import dataset, feature, featureset, field, inputs, pipeline
from fennel_dagster.commit.errors import (
    BranchExistsError,
    BranchNotFoundError,
    BranchNotSynced,
    CommitRejected,
    MainBranchDeletion,
)
from fennel_dagster.commit.executable import PLATFORM_RULES
from fennel_dagster.commit.validate import validate
from fennel_dagster.declare import commit_spec
from fennel_dagster.declare.errors import DeclarationError
from fennel_dagster.errors import QueryError
from fennel_dagster.expr import InvalidExprException, col, lit, when
from fennel_dagster.mock import MockClient, log
from fennel_dagster.mock.client import MockError
from fennel_dagster.query.lookup import DatasetNotFound
from fennel_dagster.sources import S3, Kafka, Postgres, Webhook, eval, ref, sink, source

__owner__ = "compat@example.com"  # Fennel's module-level owner: no @meta needed below

WEBHOOK = Webhook(name="fennel_webhook")
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def _events() -> pd.DataFrame:
    return pd.DataFrame(
        {"uid": [1, 2, 1], "amount": [10, 20, 5],
         "ts": [T0, T0, T0 + pd.Timedelta(hours=1)]}
    )  # fmt: skip


def test_declarations_inside_a_function_with_local_imports_commit_and_run() -> None:
    from fennel_dagster.aggregate import Count, Sum  # local imports, as Fennel's docs do
    from fennel_dagster.window import Continuous

    scale = 3  # a local constant and a local helper the lambda reads

    def triple(x: pd.Series) -> pd.Series:
        return x * scale

    @source(WEBHOOK.endpoint("Txn"), disorder="14d", cdc="append")
    @dataset
    class Txn:
        uid: int
        amount: int
        ts: datetime

    @dataset(index=True)
    class Spend:
        uid: int = field(key=True)
        n: int
        total: int
        ts: datetime

        @pipeline
        @inputs(Txn)
        def agg(cls, txn):  # type: ignore[no-untyped-def]
            return (
                txn.assign("amount", int, lambda df: triple(df["amount"]))
                .groupby("uid")
                .aggregate(n=Count(window=Continuous("forever")),
                           total=Sum(of="amount", window=Continuous("forever")))
            )  # fmt: skip

    client = MockClient()
    client.commit("v1", datasets=[Txn, Spend])  # owned by __owner__, shipped with its closure
    assert client.log("fennel_webhook", "Txn", _events().iloc[:2]).status_code == 200
    assert log(Txn, _events().iloc[2:]).status_code == 200  # fennel.testing.log
    # Fennel's tests look datasets up directly, outside any extractor
    df, found = Spend.lookup(pd.Series([T0 + pd.Timedelta(hours=2)] * 2), uid=pd.Series([1, 2]))
    assert found.tolist() == [True, True]
    assert df["total"].tolist() == [45, 60] and df["n"].tolist() == [2, 1]


def test_owner_comes_from_the_module_and_meta_overrides_it() -> None:
    @dataset
    class Plain:
        uid: int
        ts: datetime

    spec = commit_spec("m", [Plain])
    assert spec.datasets[0].meta.owner == "compat@example.com"


def test_mock_branches_keep_their_own_definitions_and_share_webhook_rows() -> None:
    @source(WEBHOOK.endpoint("B"), disorder="14d", cdc="upsert")
    @dataset(index=True)
    class B:
        uid: int = field(key=True)
        v: int
        ts: datetime

    client = MockClient()
    client.commit("main", datasets=[B])
    client.log("fennel_webhook", "B", pd.DataFrame({"uid": [1], "v": [1], "ts": [T0]}))
    client.clone_branch("exp")  # a copy, checked out
    later = T0 + pd.Timedelta(hours=1)
    client.log("fennel_webhook", "B", pd.DataFrame({"uid": [1], "v": [2], "ts": [later]}))
    assert client.branch == "exp" and sorted(client.list_branches()) == ["exp", "main"]
    keys = pd.DataFrame({"uid": [1]})
    assert client.lookup(B, keys)[0]["v"].tolist() == [2]
    client.checkout("main")  # a webhook is the namespace's: its rows reach every branch
    assert client.lookup(B, keys)[0]["v"].tolist() == [2]
    client.init_branch("empty")  # checked out, nothing committed
    with pytest.raises(DatasetNotFound) as nf:  # Fennel's words; ours (and the fix) in hint
        client.lookup(B, keys)
    assert str(nf.value) == "Dataset `B` not found" and "commit it first" in str(nf.value.hint)
    with pytest.raises(BranchExistsError) as exists:
        client.init_branch("exp")
    assert str(exists.value) == "Branch name: `exp` already exists"
    refusals = [  # (call, class, Fennel's words) as str() gives them
        (lambda: client.clone_branch("main", from_branch="exp"), BranchExistsError,
         "Branch `main` already exists"),
        (lambda: client.clone_branch("x", from_branch="gone"), BranchNotFoundError,
         "Branch `gone` does not exist"),
        (lambda: client.delete_branch("main"), MainBranchDeletion,
         "Cannot delete the main branch."),
        (lambda: client.delete_branch("gone"), BranchNotFoundError,
         "Branch name: gone does not exist"),
    ]  # fmt: skip
    for call, cls, words in refusals:
        with pytest.raises(cls) as refused:
            call()
        assert str(refused.value) == words and refused.value.hint
    client.delete_branch("empty")
    assert client.branch == "main" and sorted(client.list_branches()) == ["exp", "main"]
    client.checkout("nope")  # named, as Fennel's clients do; the next request says it is missing
    assert client.branch == "nope" and "nope" not in client.list_branches()
    with pytest.raises(BranchNotSynced) as missing:  # a KeyError in Fennel: str() is quoted
        client.lookup(B, keys)
    assert str(missing.value) == (
        '"Branch: `nope` not found, please sync this branch and try again. Available '
        "branches: ['main', 'exp']\""
    )
    assert isinstance(missing.value, KeyError) and "init=True" in str(missing.value.hint)
    client.checkout("new", init=True)
    assert client.branch == "new"


def test_query_takes_input_dataframe_and_features_take_meta() -> None:
    @featureset
    class Numbers:
        num: int
        double: int = feature(col("num") * 2).meta(description="twice the number")

    client = MockClient()
    client.commit("fs", featuresets=[Numbers])
    out = client.query(inputs=[Numbers.num], outputs=[Numbers.double],
                       input_dataframe=pd.DataFrame({"Numbers.num": [1, 2]}))  # fmt: skip
    assert out["Numbers.double"].tolist() == [2, 4]
    assert commit_spec("m", [], [Numbers]).featuresets[0].features[1].description == (
        "twice the number"
    )
    with pytest.raises(QueryError, match="input rows once"):
        client.query([Numbers.num], [Numbers.double])
    with pytest.raises(QueryError, match="logs features"):
        client.query([Numbers.num], [Numbers.double], input_dataframe=pd.DataFrame(
            {"Numbers.num": [1]}), log=True)  # fmt: skip


def test_field_meta_and_drop_columns() -> None:
    @dataset
    class Wide:
        uid: int = field(key=True).meta(description="the user")
        a: int
        b: int
        ts: datetime

    @dataset
    class Narrow:
        uid: int = field(key=True)
        ts: datetime

        @pipeline
        @inputs(Wide)
        def slim(cls, wide):  # type: ignore[no-untyped-def]
            return wide.drop(columns=["a", "b"])

    spec = {d.name: d for d in commit_spec("m", [Wide, Narrow]).datasets}
    assert spec["Wide"].fields[0].description == "the user"
    assert [f.name for f in spec["Narrow"].fields] == ["uid", "ts"]


def test_connections_by_name_alone() -> None:
    assert Postgres.get(name="pg").name == "pg" and Kafka.get(name="k").name == "k"
    assert S3.get(name="s3").name == "s3"


def test_sinks_follow_fennels_rules_and_the_platform_writes_only_its_own_kafka() -> None:
    kafka = Kafka(name="out")
    with pytest.raises(DeclarationError, match="cdc='debezium'"):
        sink(kafka.topic("t"), cdc="append")
    with pytest.raises(DeclarationError, match="Delta"):
        sink(S3(name="lake").bucket("b", prefix="p", format="parquet"), how="incremental")

    @sink(kafka.topic("spend_changes"), cdc="debezium")
    @source(WEBHOOK.endpoint("S"), disorder="14d", cdc="upsert")
    @dataset(index=True)
    class S:
        uid: int = field(key=True)
        ts: datetime

    MockClient().commit("sinks", datasets=[S])  # the mock accepts it (and writes nothing)
    spec = commit_spec("sinks", [S])
    assert spec.datasets[0].sinks[0].connector.config == (
        ("format", "json"), ("topic", "spend_changes"))  # fmt: skip
    # what the definition server runs: a Kafka sink on the platform's cluster (a connection
    # named without bootstrap servers is the platform's, as for sources) is written
    assert validate(spec, None, PLATFORM_RULES) == []

    far = Kafka(name="far", bootstrap_servers="elsewhere:9092")

    @sink(far.topic("spend_changes"), cdc="debezium")
    @source(WEBHOOK.endpoint("S"), disorder="14d", cdc="upsert")
    @dataset(index=True)
    class Far:
        uid: int = field(key=True)
        ts: datetime

    errors = validate(commit_spec("far", [Far]), None, PLATFORM_RULES)
    assert [(e.entity, e.where) for e in errors] == [("Far", "sink kafka(far)")], errors
    assert "another Kafka cluster (elsewhere:9092)" in errors[0].message
    assert "env=" in errors[0].fix


def test_expressions_type_and_evaluate_as_in_fennel() -> None:
    assert (~lit(True)).typeof() is bool
    e = col("x") + col("y")
    assert e.typeof(schema={"x": int, "y": float}) is float
    for bad in ({}, {"x": int}, {"z": int, "y": float}):
        with pytest.raises(ValueError):
            e.typeof(schema=bad)
    df = pd.DataFrame({"x": [1, 2, 3], "y": [1.0, 2.0, 3.0]})
    assert e.eval(df, schema={"x": int, "y": float}).tolist() == [2.0, 4.0, 6.0]
    w = when(col("x")).then(1).otherwise(0)
    assert w.typeof(schema={"x": bool}) is int
    with pytest.raises(ValueError):
        w.typeof(schema={"x": int})  # the condition is not a bool
    assert when(col("x")).then(1).typeof(schema={"x": bool}) == Optional[int]  # noqa: UP045
    with pytest.raises(InvalidExprException):
        when(col("x")).typeof(schema={"x": bool})
    assert col("x").isnull().typeof(schema={"x": Optional[int]}) is bool  # noqa: UP045


def test_source_preproc_ref_eval_and_sample() -> None:
    @source(
        WEBHOOK.endpoint("People"), disorder="14d", cdc="upsert",
        preproc={
            "uid": ref("user_id"),  # from another raw column
            "country": "USA",  # a literal
            "age": eval(lambda df: pd.to_numeric(df["age"]).astype(int), schema={"age": str}),
        },
        where=eval(col("age") >= 18, schema={"age": int}),
    )  # fmt: skip
    @dataset(index=True)
    class People:
        uid: int = field(key=True)
        country: str
        age: int
        ts: datetime

    client = MockClient()
    client.commit("people", datasets=[People])
    raw = pd.DataFrame({"user_id": [1, 2, 3], "age": ["17", "30", "45"], "ts": [T0] * 3})
    client.log("fennel_webhook", "People", raw)
    df, found = client.lookup(People, pd.DataFrame({"uid": [1, 2, 3]}))
    assert found.tolist() == [False, True, True]
    assert df["country"].tolist()[1:] == ["USA", "USA"] and df["age"].tolist()[1:] == [30, 45]


def test_sampling_keeps_the_same_rows_everywhere() -> None:
    from fennel_dagster.ops.source_rules import preprocess
    from fennel_dagster.sources import Sample

    @source(WEBHOOK.endpoint("Sampled"), disorder="14d", cdc="append",
            sample=Sample(0.25, using=["uid"]))  # fmt: skip
    @dataset
    class Sampled:
        uid: int
        ts: datetime

    src = commit_spec("s", [Sampled]).datasets[0].sources[0]
    rows = pd.DataFrame({"uid": range(4000), "ts": [T0] * 4000})
    kept = preprocess(src, rows)
    assert 800 < len(kept) < 1200  # about a quarter
    assert kept["uid"].tolist() == preprocess(src, rows.iloc[::-1])["uid"].tolist()[::-1]
    with pytest.raises(DeclarationError, match="within"):
        source(WEBHOOK.endpoint("x"), sample=1.5)(Sampled)


def test_connectors_the_platform_cannot_read_are_declared_and_refused_by_name() -> None:
    from fennel_dagster.sources import HTTP, Avro, Kinesis, MySQL, Snowflake

    mysql = MySQL(name="my_mysql", host="db", db_name="app", username="u", password="secret")
    stream = Kinesis(name="k", role_arn="arn").stream("arn:stream", init_position="latest")
    avro = Avro(registry="confluent", url="http://registry", username="u", password="p")

    @source(mysql.table("users", cursor="updated_at"), disorder="14d", cdc="upsert")
    @dataset(index=True)
    class FromMySQL:
        uid: int = field(key=True)
        ts: datetime

    @source(stream, disorder="14d", cdc="append")
    @sink(Snowflake(name="sf", account="a").table("out"))
    @dataset
    class FromKinesis:
        uid: int
        ts: datetime

    @source(Kafka(name="k").topic("t", format=avro), disorder="14d", cdc="append")
    @sink(HTTP(name="h", host="http://127.0.0.1:9").path(endpoint="/in", limit=100),
          cdc="debezium")  # fmt: skip
    @dataset
    class FromAvro:
        uid: int
        ts: datetime

    spec = commit_spec("ext", [FromMySQL, FromKinesis, FromAvro])
    secrets = [str(c.config) for d in spec.datasets for c in [s.connector for s in d.sources]]
    assert not any("secret" in s or "'p'" in s for s in secrets), secrets  # never in the IR
    MockClient().commit("ext", datasets=[FromMySQL, FromKinesis, FromAvro])  # the mock takes them
    errors = validate(spec, None, PLATFORM_RULES)
    named = sorted(f"{e.entity}: {e.where}" for e in errors)
    assert named == [
        "FromAvro: sink http(h)", "FromKinesis: sink snowflake(sf)",
        "FromKinesis: source kinesis(k)", "FromMySQL: source mysql(my_mysql)",
    ], named  # fmt: skip


def test_the_mock_raises_on_rows_a_pipeline_cannot_produce_unless_told_not_to() -> None:
    @source(WEBHOOK.endpoint("Amounts"), disorder="14d", cdc="upsert")
    @dataset(index=True)
    class Amounts:
        uid: int = field(key=True)
        amount: int
        ts: datetime

    @dataset(index=True)
    class Halved:
        uid: int = field(key=True)
        amount: int
        half: int
        ts: datetime

        @pipeline
        @inputs(Amounts)
        def halve(cls, amounts):  # type: ignore[no-untyped-def]
            return amounts.assign("half", int, lambda df: df["amount"] * 0.5)  # not an int

    rows = pd.DataFrame({"uid": [1], "amount": [10], "ts": [T0]})
    strict = MockClient()
    strict.commit("m", datasets=[Amounts, Halved])
    with pytest.raises(MockError, match="could not go through the pipelines"):
        strict.log("fennel_webhook", "Amounts", rows)
    lenient = MockClient(strict=False)
    lenient.commit("m", datasets=[Amounts, Halved])
    result = lenient.log("fennel_webhook", "Amounts", rows)
    assert result.accepted == 1 and len(result.errors) == 1 and "half" in result.errors[0].reason


def test_min_and_max_need_an_ordered_number_or_time() -> None:
    from fennel_dagster.aggregate import Max
    from fennel_dagster.window import Continuous

    @source(WEBHOOK.endpoint("Zips"), disorder="14d", cdc="append")
    @dataset
    class Zips:
        uid: int
        zip: str
        ts: datetime

    with pytest.raises(DeclarationError, match="Max of 'zip' needs a number"):

        @dataset
        class Biggest:
            uid: int = field(key=True)
            max: str
            ts: datetime

            @pipeline
            @inputs(Zips)
            def agg(cls, zips):  # type: ignore[no-untyped-def]
                return zips.groupby("uid").aggregate(
                    max=Max(of="zip", window=Continuous("1d"), default="max")
                )


def test_extractors_are_plain_functions_on_the_featureset_and_may_name_outputs_in_full() -> None:
    from fennel_dagster import extractor, outputs

    @featureset
    class Ages:
        age: int
        age_squared: int
        is_adult: bool

        @extractor
        @inputs("age")
        @outputs("age_squared", "is_adult")
        def squares(cls, ts: pd.Series, age: pd.Series):  # type: ignore[no-untyped-def]
            df = pd.concat([age**2, age >= 18], axis=1)
            df.columns = [str(cls.age_squared), str(cls.is_adult)]  # "Ages.age_squared", ...
            return df

    # a unit test of the extractor alone, as Fennel's docs write it
    direct = Ages.squares(Ages, pd.Series([T0, T0]), pd.Series([32, 12]))
    assert direct["Ages.age_squared"].tolist() == [1024, 144]
    client = MockClient()
    client.commit("ages", featuresets=[Ages])
    out = client.query([Ages.age], [Ages.age_squared, Ages.is_adult],
                       input_dataframe=pd.DataFrame({"Ages.age": [32, 12]}))  # fmt: skip
    assert out["Ages.age_squared"].tolist() == [1024, 144]
    assert out["Ages.is_adult"].tolist() == [True, False]


def test_extractor_inputs_and_outputs_as_fennel_writes_them() -> None:
    from fennel_dagster import extractor, outputs

    @featureset
    class Request:
        uid: int

    @featureset
    class Person:
        uid: int = feature(Request.uid)  # a copy: Request must be committed (as in Fennel)
        age: int = feature().meta(description="years")
        age_squared: int
        shout: str

        @extractor
        @inputs(age)  # the class body's feature object, before @featureset names it
        @outputs("age_squared")
        def square(cls, ts: pd.Series, age: pd.Series):  # type: ignore[no-untyped-def]
            return (age**2).rename("age_squared")

        @extractor(env="bronze")  # no @outputs: every feature, as in Fennel
        def everything(cls, ts, uid):  # type: ignore[no-untyped-def]
            raise AssertionError("excluded by env")

    (square,) = [e for e in Person.spec().extractors if e.name == "square"]
    assert (square.inputs, square.outputs) == (("Person.age",), ("age_squared",))
    (every,) = [e for e in Person.spec().extractors if e.name == "everything"]
    assert every.outputs == ("uid", "age", "age_squared", "shout")
    client = MockClient()
    with pytest.raises(CommitRejected, match="featureset Request is not in the commit"):
        client.commit("people", featuresets=[Person], env="silver")
    client.commit("people", featuresets=[Request, Person], env="silver")
    out = client.query([Request.uid, Person.age], [Person.uid, Person.age_squared],
                       input_dataframe=pd.DataFrame({"Request.uid": [7, 8],
                                                     "Person.age": [3, 4]}))  # fmt: skip
    assert out["Person.uid"].tolist() == [7, 8]
    assert out["Person.age_squared"].tolist() == [9, 16]
    # a featureset that is committed must declare the inputs named from it
    with pytest.raises(Exception, match="is not a feature of Request"):

        @featureset
        class Typo:
            uid: int = feature(Request.uid)
            n: int

            @extractor
            @inputs("Request.uidd")
            @outputs("n")
            def count(cls, ts, uidd):  # type: ignore[no-untyped-def]
                return uidd

        MockClient().commit("typo", featuresets=[Request, Typo])


def test_a_key_without_rows_looks_up_as_null_with_the_key_as_asked() -> None:
    from fennel_dagster.aggregate import Count, Sum
    from fennel_dagster.window import Continuous

    @source(WEBHOOK.endpoint("txns"), disorder="1d", cdc="append")
    @dataset
    class Txns:
        uid: int
        amount: float
        ts: datetime

    @source(WEBHOOK.endpoint("people"), disorder="1d", cdc="upsert")
    @dataset(index=True)
    class People:
        uid: int = field(key=True)
        age: int
        height: float
        ts: datetime

    @dataset(index=True)
    class Totals:
        uid: int = field(key=True)
        count: int
        total: float
        ts: datetime

        @pipeline
        @inputs(Txns)
        def agg(cls, txns):  # type: ignore[no-untyped-def]
            return txns.groupby("uid").aggregate(
                count=Count(window=Continuous("forever")),
                total=Sum(of="amount", window=Continuous("1d")),
            )

    client = MockClient()
    client.commit("null lookups", datasets=[Txns, People, Totals])
    client.log("fennel_webhook", "txns", pd.DataFrame({"uid": [1, 1], "amount": [2.0, 3.0],
                                                       "ts": [T0, T0]}))  # fmt: skip
    client.log("fennel_webhook", "people", pd.DataFrame({"uid": [1], "age": [30],
                                                         "height": [1.8], "ts": [T0]}))  # fmt: skip
    ts = pd.Series([T0, T0])
    totals, found = Totals.lookup(ts, uid=pd.Series([1, 2]))
    assert found.tolist() == [True, False]
    # list equality takes pd.NA by identity: a 0 or a NaN here would raise, as in Fennel's docs
    assert totals["count"].tolist() == [2, pd.NA]
    assert totals["total"].tolist() == [5.0, pd.NA]
    people, found = client.lookup("People", keys=pd.DataFrame({"uid": [1, 2]}),
                                  timestamps=ts)  # fmt: skip
    assert found.tolist() == [True, False]
    assert people["uid"].tolist() == [1, 2]
    assert people["age"].tolist() == [30, pd.NA]
    assert people["height"].tolist() == [1.8, pd.NA]


def test_astype_declares_an_assigned_columns_type_and_does_not_convert() -> None:
    @source(WEBHOOK.endpoint("amounts"), disorder="1d", cdc="upsert")
    @dataset
    class Amounts:
        uid: int = field(key=True)
        amount: int
        ts: datetime

    with pytest.raises(
        DeclarationError, match="'half' is declared int but the expression gives float"
    ):

        @dataset
        class Halves:
            uid: int = field(key=True)
            half: int
            ts: datetime

            @pipeline
            @inputs(Amounts)
            def p(cls, amounts):  # type: ignore[no-untyped-def]
                return amounts.assign(half=(col("amount") / 2).astype(int)).drop("amount")

    @dataset
    class Widened:  # an int declared float, a bool declared int: widening is allowed
        uid: int = field(key=True)
        amount: int
        as_float: float
        big: int
        ts: datetime

        @pipeline
        @inputs(Amounts)
        def p(cls, amounts):  # type: ignore[no-untyped-def]
            return amounts.assign(
                as_float=col("amount").astype(float), big=(col("amount") > 10).astype(int)
            )

    client = MockClient()
    client.commit("widened", datasets=[Amounts, Widened])
    client.log("fennel_webhook", "amounts", pd.DataFrame({"uid": [1], "amount": [20], "ts": [T0]}))
    got = client.get_dataset_df("Widened")
    assert got[["as_float", "big"]].values.tolist() == [[20.0, 1]]


def test_a_filter_or_transform_returning_the_wrong_type_is_an_error_not_a_cast() -> None:
    @source(WEBHOOK.endpoint("cities"), disorder="1d", cdc="upsert")
    @dataset
    class Cities:
        uid: int = field(key=True)
        city: str
        ts: datetime

    @dataset
    class Truthy:
        uid: int = field(key=True)
        city: str
        ts: datetime

        @pipeline
        @inputs(Cities)
        def p(cls, cities):  # type: ignore[no-untyped-def]
            return cities.filter(lambda df: df["city"] + "London")  # strings, not bools

    @dataset
    class Squares:
        uid: int = field(key=True)
        city: str
        square: int
        ts: datetime

        @pipeline
        @inputs(Cities)
        def p(cls, cities):  # type: ignore[no-untyped-def]
            schema = {**cities.schema(), "square": int}
            return cities.transform(lambda df: df.assign(square=str(df["uid"])), schema)

    rows = pd.DataFrame({"uid": [1], "city": ["Oslo"], "ts": [T0]})
    for bad, why in ((Truthy, "not a bool"), (Squares, "'square' \\(declared int\\)")):
        client = MockClient()
        client.commit("bad types", datasets=[Cities, bad])
        with pytest.raises(MockError, match=why):
            client.log("fennel_webhook", "cities", rows)
        lenient = MockClient(strict=False)
        lenient.commit("bad types", datasets=[Cities, bad])
        lenient.log("fennel_webhook", "cities", rows)  # the row goes to the error rows
        assert lenient.get_dataset_df(bad.__name__).empty


def test_tracking_an_offline_query_on_the_mock_answers_404_as_fennels_mock_does() -> None:
    client = MockClient()
    for call in (client.track_offline_query, client.cancel_offline_query):
        response = call("bf5dfe5d-0040-4405-a224-b82c7a5bf085")
        assert response.status_code == 404 and not response.ok
        assert "answers query_offline at once" in response.json()["error"]
