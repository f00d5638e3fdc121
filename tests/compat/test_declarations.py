"""Declarations Fennel's documentation uses that fennel_dagster declares as Fennel does: the
``Window`` dtype, windows' keyword names, the Mongo/PubSub/Protobuf/Certificate connectors and
``Secret``, ``field(erase_key=True)`` with ``client.erase``, and ``ExpDecaySum``."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
import pytest

from fennel_dagster import dataset, field, inputs, pipeline
from fennel_dagster.aggregate import ExpDecaySum, Sum
from fennel_dagster.commit.executable import PLATFORM_RULES
from fennel_dagster.commit.validate import validate
from fennel_dagster.declare import commit_spec
from fennel_dagster.declare.errors import DeclarationError
from fennel_dagster.dtypes import Continuous, Hopping, Session, Tumbling, Window
from fennel_dagster.integrations.aws import Secret
from fennel_dagster.mock import MockClient
from fennel_dagster.mock.client import MockError
from fennel_dagster.ops.aggregate.values import exp_decay_sum
from fennel_dagster.sources import (
    HTTP,
    Avro,
    Certificate,
    Kafka,
    Mongo,
    Protobuf,
    PubSub,
    Webhook,
    sink,
    source,
)
from fennel_dagster.wire import spec
from fennel_dagster.wire.codec import decode, encode, to_jsonable

__owner__ = "compat@example.com"

HOOK = Webhook(name="decl_hook")
T0 = datetime(2024, 3, 1, tzinfo=UTC)
DAY = timedelta(days=1)


# --------------------------------------------------------------------------- windows


def test_window_is_a_struct_dtype_of_begin_and_end() -> None:
    @source(HOOK.endpoint("Spans"), disorder="14d", cdc="upsert")
    @dataset(index=True)
    class Spans:
        uid: int = field(key=True)
        window: Window
        ts: datetime

    fields = {f.name: f.dtype for f in commit_spec("w", [Spans]).datasets[0].fields}
    assert fields["window"] == spec.StructType(
        "Window",
        (spec.StructField("begin", spec.TimestampType()),
         spec.StructField("end", spec.TimestampType())),
    )  # fmt: skip
    w = Window(begin=T0, end=T0 + DAY)
    assert (w.begin, w.end) == (T0, T0 + DAY)


def test_windows_take_fennels_keyword_names() -> None:
    assert Tumbling(duration="10s").to_ir() == spec.WindowSpec("tumbling", 10, 10)
    assert Tumbling(duration="1h", lookback="5m").to_ir().lookback == 300
    assert Hopping(duration="1h", stride="10m").to_ir() == spec.WindowSpec("hopping", 3600, 600)
    assert Continuous(duration="7d").to_ir() == spec.WindowSpec("continuous", 7 * 86400)
    assert Continuous(duration="forever").to_ir() == spec.WindowSpec("forever")
    assert Session(gap="15m").to_ir() == spec.WindowSpec("session", gap=900)


def test_a_tumbling_window_of_forever_is_refused_with_a_value_error_naming_the_fix() -> None:
    with pytest.raises(ValueError, match="'forever' is not a valid duration value for Tumbling"):
        Tumbling("forever")
    with pytest.raises(DeclarationError, match="Continuous"):
        Tumbling(duration="forever")


# --------------------------------------------------------------------------- connectors


def test_a_secret_is_a_path_into_an_aws_secret_and_indexing_leaves_it_unchanged() -> None:
    root = Secret(arn="arn:aws:secretsmanager:r:1:secret:s", role_arn="arn:aws:iam::1:role/r")
    user = root["kafka"]["username"]
    assert user.path == ("kafka", "username") and root.path == ()
    assert user == Secret(root.arn, root.role_arn, ["kafka", "username"])
    assert repr(user) == "Secret('arn:aws:secretsmanager:r:1:secret:s')['kafka']['username']"
    with pytest.raises(DeclarationError, match="ARN"):
        Secret(arn="")


def test_protobuf_needs_username_and_password_or_a_token() -> None:
    Protobuf(registry="confluent", url="http://r", username="u", password="p")
    Protobuf(registry="confluent", url="http://r", token=Secret("arn:x")["token"])
    with pytest.raises(DeclarationError, match="not both"):
        Protobuf(registry="confluent", url="http://r", username="u", password="p", token="t")
    with pytest.raises(DeclarationError, match="both username= and password="):
        Protobuf(registry="confluent", url="http://r", username="u")
    with pytest.raises(DeclarationError, match="or token="):
        Protobuf(registry="confluent", url="http://r")


def test_pubsub_topics_are_json() -> None:
    with pytest.raises(DeclarationError, match="format='json'"):
        PubSub(name="ps", project_id="p", service_account_key={}).topic("t", format="avro")


def test_new_connectors_are_declared_kept_out_of_the_ir_credentials_and_refused_by_name() -> None:
    secret = Secret("arn:aws:secretsmanager:r:1:secret:s")
    mongo = Mongo(name="mongo_src", host="h", db_name="db", username="u", password="hunter2")
    pubsub = PubSub(name="pubsub_src", project_id="proj",
                    service_account_key={"private_key": "KEY", "client_email": "e"})  # fmt: skip
    kafka = Kafka(name="k", bootstrap_servers="b:9092", sasl_plain_username=secret["u"],
                  sasl_plain_password=secret["p"])  # fmt: skip
    proto = Protobuf(registry="confluent", url="http://r", username="u", password="pw")
    avro = Avro(registry="confluent", url="http://r", username=secret["ru"], password=secret["rp"])
    http = HTTP(name="h", host="http://sink", healthz="/health", ca_cert=Certificate(secret["ca"]))

    @source(mongo.collection("user", cursor="ts"), disorder="14d", cdc="append")
    @dataset
    class FromMongo:
        uid: int
        ts: datetime

    @source(pubsub.topic("clicks", format="json"), disorder="2d", cdc="upsert")
    @dataset(index=True)
    class FromPubSub:
        uid: int = field(key=True)
        ts: datetime

    @source(kafka.topic("user", format=proto), disorder="14d", cdc="upsert")
    @dataset(index=True)
    class FromProto:
        uid: int = field(key=True)
        ts: datetime

    @source(kafka.topic("user", format=avro), disorder="14d", cdc="upsert")
    @sink(http.path(endpoint="/sink", limit=10), cdc="debezium", how="incremental")
    @dataset(index=True)
    class FromAvro:
        uid: int = field(key=True)
        ts: datetime

    datasets = [FromMongo, FromPubSub, FromProto, FromAvro]
    commit = commit_spec("ext", datasets)
    conns = {d.name: dict(d.sources[0].connector.config) for d in commit.datasets}
    assert conns["FromMongo"] == {"collection": "user", "cursor": "ts", "db_name": "db",
                                  "host": "h", "username": "u"}  # fmt: skip
    assert conns["FromPubSub"] == {"format": "json", "project_id": "proj", "topic_id": "clicks"}
    assert conns["FromProto"]["format"] == "protobuf"
    text = str(to_jsonable(commit))
    for leaked in ("hunter2", "KEY", "arn:aws", "'pw'"):
        assert leaked not in text, leaked  # credentials and secret references stay out
    MockClient().commit("ext", datasets=datasets)  # the mock takes them, as Fennel's does
    errors = validate(commit, None, PLATFORM_RULES)
    got = {f"{e.entity}: {e.where}": e.message for e in errors}
    # Avro and Protobuf through a Confluent-compatible registry are read (test_registry_sources)
    assert sorted(got) == [
        "FromAvro: sink http(h)", "FromMongo: source mongo(mongo_src)",
        "FromPubSub: source pubsub(pubsub_src)",
    ], got  # fmt: skip
    assert "no reader for mongo" in got["FromMongo: source mongo(mongo_src)"]
    assert "no reader for pubsub" in got["FromPubSub: source pubsub(pubsub_src)"]


def test_registry_formats_the_engine_cannot_read_are_refused_with_the_fix() -> None:
    kafka = Kafka(name="k")

    @source(kafka.topic("a", format=Avro(registry="glue", url="http://r")), disorder="1d",
            cdc="append")  # fmt: skip
    @dataset
    class GlueAvro:
        uid: int
        ts: datetime

    proto = Protobuf(registry="confluent", url="registry:8081", username="u", password="p")

    @source(kafka.topic("p", format=proto), disorder="1d", cdc="append")
    @dataset
    class NoScheme:
        uid: int
        ts: datetime

    @source(kafka.topic("c", format="csv"), disorder="1d", cdc="append")
    @dataset
    class Csv:
        uid: int
        ts: datetime

    errors = validate(commit_spec("fmt", [GlueAvro, NoScheme, Csv]), None, PLATFORM_RULES)
    got = {e.entity: (e.message, e.fix) for e in errors}
    assert sorted(got) == ["Csv", "GlueAvro", "NoScheme"], got
    assert "registry 'glue'" in got["GlueAvro"][0]
    assert got["GlueAvro"][1] == 'give Avro(registry="confluent", url=...)'
    assert "'registry:8081': not an http(s) URL" in got["NoScheme"][0]
    assert "format 'csv'" in got["Csv"][0]


# --------------------------------------------------------------------------- erase


def _erasable() -> type:
    @source(HOOK.endpoint("Txn"), disorder="14d", cdc="upsert")
    @dataset(index=True)
    class Txn:
        uid: int = field(key=True, erase_key=True)
        region: str = field(key=True)
        amount: int
        ts: datetime

    return Txn


def test_erase_removes_a_keys_rows_now_and_drops_them_when_logged_later() -> None:
    txn = _erasable()

    @dataset(index=True)
    class Spend:
        uid: int = field(key=True)
        total: int
        ts: datetime

        @pipeline
        @inputs(txn)
        def spend(cls, t):  # type: ignore[no-untyped-def]
            return t.groupby("uid").aggregate(total=Sum(of="amount", window=Continuous("forever")))

    client = MockClient()
    client.commit("erase", datasets=[txn, Spend])
    rows = pd.DataFrame({"uid": [1, 1, 2], "region": ["eu", "us", "eu"], "amount": [10, 20, 30],
                         "ts": [T0, T0, T0]})  # fmt: skip
    client.log("decl_hook", "Txn", rows)
    answer = client.erase(txn, erase_keys=pd.DataFrame({"uid": [1, 7]}))
    assert answer.status_code == 200  # Fennel code checks the answer
    keys = pd.DataFrame({"uid": [1, 1, 2], "region": ["eu", "us", "eu"]})
    _, found = client.lookup("Txn", keys=keys, timestamps=pd.Series([T0 + DAY] * 3))
    assert found.tolist() == [False, False, True]
    assert client.get_dataset_df("Txn")["uid"].tolist() == [2]

    later = pd.DataFrame({"uid": [1, 2], "region": ["eu", "eu"], "amount": [5, 6],
                          "ts": [T0 + DAY, T0 + DAY]})  # fmt: skip
    client.log("decl_hook", "Txn", later)
    assert client.get_dataset_df("Txn")["uid"].tolist() == [2, 2]
    # the erased key's later row reached no pipeline; its earlier rows had already gone
    # downstream, which erase leaves alone (as in Fennel: erase those datasets too)
    df, found = client.lookup("Spend", keys=pd.DataFrame({"uid": [1, 2]}),
                              timestamps=pd.Series([T0 + 2 * DAY] * 2))  # fmt: skip
    assert df["total"].tolist() == [30, 36]


def test_erase_of_a_continuous_aggregate_hides_its_keys_now_and_later() -> None:
    # Fennel's reference: erase removes the data of the dataset in the request, whichever
    # dataset it is (Fennel's client test ``test_basic_aggregate_with_erase`` erases one)
    txn = _erasable()

    @dataset(index=True)
    class Spent:
        uid: int = field(key=True, erase_key=True)
        total: int
        ts: datetime

        @pipeline
        @inputs(txn)
        def spend(cls, t):  # type: ignore[no-untyped-def]
            return t.groupby("uid").aggregate(total=Sum(of="amount", window=Continuous("forever")))

    client = MockClient()
    client.commit("erase", datasets=[txn, Spent])
    client.log("decl_hook", "Txn", pd.DataFrame({
        "uid": [1, 2, 3], "region": ["eu"] * 3, "amount": [10, 20, 30], "ts": [T0] * 3}))  # fmt: skip
    assert client.erase(Spent, erase_keys=pd.DataFrame({"uid": [1, 3]})).status_code == 200
    keys = pd.DataFrame({"uid": [1, 2, 3]})
    df, found = client.lookup("Spent", keys=keys)
    assert found.tolist() == [False, True, False]
    assert df["total"].tolist()[1] == 20 and df["total"].isna().tolist() == [True, False, True]
    client.log("decl_hook", "Txn", pd.DataFrame({
        "uid": [1, 2], "region": ["us"] * 2, "amount": [5, 6], "ts": [T0 + DAY] * 2}))  # fmt: skip
    df, found = client.lookup("Spent", keys=keys, timestamps=pd.Series([T0 + 2 * DAY] * 3))
    assert found.tolist() == [False, True, False]
    assert df["total"].tolist()[1] == 26
    assert client.get_dataset_df("Spent")["uid"].tolist() == [2, 2]


def test_erase_names_the_dataset_and_field_when_the_keys_are_wrong() -> None:
    txn = _erasable()
    client = MockClient()
    client.commit("erase", datasets=[txn])
    with pytest.raises(MockError, match="'amount' is not a key field of Txn"):
        client.erase("Txn", erase_keys=pd.DataFrame({"amount": [1]}))
    with pytest.raises(MockError, match="'region' is not an erase key of Txn"):
        client.erase("Txn", erase_keys=pd.DataFrame({"uid": [1], "region": ["eu"]}))
    with pytest.raises(MockError, match="'nope' is not a field of Txn"):
        client.erase("Txn", erase_keys=pd.DataFrame({"nope": [1]}))
    with pytest.raises(MockError, match="missing uid"):
        client.erase("Txn", erase_keys=pd.DataFrame())
    with pytest.raises(MockError, match="do not fit"):
        client.erase("Txn", erase_keys=pd.DataFrame({"uid": ["x"]}))


def test_erase_key_is_for_key_fields_and_recorded_in_the_ir() -> None:
    assert commit_spec("e", [_erasable()]).datasets[0].erase_keys == ("uid",)
    with pytest.raises(DeclarationError, match=r"Bad\.amount has erase_key=True but is not a key"):

        @dataset
        class Bad:
            uid: int
            amount: int = field(erase_key=True)
            ts: datetime

    @source(HOOK.endpoint("Plain"), disorder="14d", cdc="upsert")
    @dataset(index=True)
    class Plain:
        uid: int = field(key=True)
        ts: datetime

    plain = commit_spec("e", [Plain]).datasets[0]
    assert "erase_keys" not in to_jsonable(plain)  # hashes of existing datasets unchanged
    client = MockClient()
    client.commit("e", datasets=[Plain])
    with pytest.raises(MockError, match="has no erase keys"):
        client.erase(Plain, erase_keys=pd.DataFrame({"uid": [1]}))


# --------------------------------------------------------------------------- ExpDecaySum


def _decayed(kind: str, span: str, half_life: str, of_type: Any = int) -> tuple[type, type]:
    """A source of payments and their decayed sum over ``Continuous(span)`` (``kind``:
    ``continuous``, ``tumbling`` or ``session``; literals, as pipelines ship as source)."""
    # the type of ``amount`` is a parameter: annotations are strings in this module
    fields = {"uid": int, "amount": of_type, "ts": datetime}
    Pay = source(HOOK.endpoint("Pay"), disorder="14d", cdc="append")(  # noqa: N806
        dataset(type("Pay", (), {"__annotations__": fields}))
    )

    @dataset(index=True)
    class Decayed:
        uid: int = field(key=True)
        score: float
        ts: datetime

        @pipeline
        @inputs(Pay)
        def decay(cls, pay):  # type: ignore[no-untyped-def]
            windows = {"continuous": Continuous, "tumbling": Tumbling, "session": Session}
            window = windows[kind](span)
            return pay.groupby("uid").aggregate(
                score=ExpDecaySum(of="amount", window=window, half_life=half_life)
            )

    return Pay, Decayed


def test_exp_decay_sum_decays_to_the_lookup_time_inside_its_window() -> None:
    pay, decayed = _decayed("continuous", "3d", "1d", float | None)
    client = MockClient()
    client.commit("decay", datasets=[pay, decayed])
    client.log("decl_hook", "Pay", pd.DataFrame({
        "uid": [1, 1, 1, 2], "amount": [8.0, 4.0, None, 2.5],
        "ts": [T0, T0 + DAY, T0 + DAY, T0 + DAY]}))  # fmt: skip
    at = [T0 + DAY, T0 + 2 * DAY, T0 + 3 * DAY, T0 + 4 * DAY + timedelta(seconds=1), T0 + DAY]
    df, found = client.lookup("Decayed", keys=pd.DataFrame({"uid": [1, 1, 1, 1, 2]}),
                              timestamps=pd.Series(at))  # fmt: skip
    # at T0+1d: 8 aged 1d + 4 fresh; a null counts nothing; the window is [t - 3d, t]
    assert df["score"].tolist() == pytest.approx([4.0 + 4.0, 2.0 + 2.0, 1.0 + 1.0, 0.0, 2.5])
    assert found.tolist() == [True] * 5
    rows = client.get_dataset_df("Decayed").sort_values(["uid", "ts"])
    assert rows["score"].tolist()[:2] == pytest.approx([8.0, 8.0])  # each as of its own time


def test_exp_decay_sum_forever_matches_the_closed_form() -> None:
    pay, decayed = _decayed("continuous", "forever", "12h")
    client = MockClient()
    client.commit("decay", datasets=[pay, decayed])
    stamps = [T0 + i * timedelta(hours=5) for i in range(20)]
    client.log("decl_hook", "Pay", pd.DataFrame({"uid": [3] * 20, "amount": list(range(20)),
                                                 "ts": stamps}))  # fmt: skip
    t = T0 + 200 * timedelta(hours=1)
    want = sum(v * 0.5 ** ((t - s) / timedelta(hours=12)) for v, s in enumerate(stamps))
    df, _ = client.lookup("Decayed", keys=pd.DataFrame({"uid": [3]}), timestamps=pd.Series([t]))
    assert df["score"].tolist() == pytest.approx([want], rel=1e-12)


def test_exp_decay_sum_is_the_same_float_whatever_the_order() -> None:
    values = [1e16, 1.0, -1e16, 3.0, 0.1]
    stamps = [0, 10, 20, 30, 40]
    forward = exp_decay_sum(values, stamps, 100, 1)
    backward = exp_decay_sum(values[::-1], stamps[::-1], 100, 1)
    assert forward == backward
    assert forward == math.fsum(
        v * math.exp2(-(100 - s) / 1e6) for v, s in zip(values, stamps, strict=True)
    )


def test_exp_decay_sum_of_a_long_idle_key_reads_zero() -> None:
    # Fennel's answer (its mock and its server): a part decayed under e**-25 reads 0.0,
    # where the exact value would be a vanishing residue such as 5 * 2**-1070
    pay, decayed = _decayed("continuous", "forever", "1d")
    client = MockClient()
    client.commit("decay", datasets=[pay, decayed])
    client.log("decl_hook", "Pay", pd.DataFrame({
        "uid": [1, 2, 3, 3], "amount": [5, -4, 3, -3000], "ts": [T0] * 4}))  # fmt: skip
    at = [T0 + 24 * DAY] * 3 + [T0 + 1070 * DAY, T0 + 37 * DAY]
    df, _ = client.lookup("Decayed", keys=pd.DataFrame({"uid": [1, 2, 3, 1, 1]}),
                          timestamps=pd.Series(at))  # fmt: skip
    # after 24 half-lives every part is far above e**-25: each stays
    assert df["score"].tolist()[:3] == pytest.approx([5 * 2**-24, -4 * 2**-24, -2997 * 2**-24])
    # 5 * 2**-37 ~ 3.6e-11 > e**-25 ~ 1.39e-11 stays; 5 * 2**-1070 reads 0
    assert df["score"].tolist()[3:] == [0.0, 5 * 2**-37]
    assert exp_decay_sum([3.0, -1.0], [0, 0], 40 * 1_000_000, 1) == 0.0  # 3 * 2**-40 < e**-25
    # the positive part alone stays (1e-11 of negative weight is flushed, 1e-3 is not)
    assert exp_decay_sum([1.0, -1e-11], [0, 0], 10 * 1_000_000, 1) == 2**-10
    assert exp_decay_sum([1.0, -1e-3], [0, 0], 10 * 1_000_000, 1) == math.fsum(
        [2**-10, -1e-3 * 2**-10]
    )


def test_exp_decay_sum_is_typed_and_validated_at_declaration() -> None:
    with pytest.raises(DeclarationError, match="half_life"):
        ExpDecaySum(of="amount", window=Continuous("1d"), half_life="0s")
    with pytest.raises(DeclarationError, match="half_life"):
        ExpDecaySum(of="amount", window=Continuous("1d"))
    with pytest.raises(DeclarationError, match="takes a continuous window, not tumbling"):
        _decayed("tumbling", "1h", "1d")
    with pytest.raises(DeclarationError, match="needs an int, float or decimal, got str"):
        _decayed("continuous", "1d", "1d", str)

    @source(HOOK.endpoint("Pay2"), disorder="14d", cdc="append")
    @dataset
    class Pay2:
        uid: int
        amount: int
        ts: datetime

    with pytest.raises(DeclarationError, match="total"):

        @dataset(index=True)
        class IntDecay:
            uid: int = field(key=True)
            total: int  # the decayed sum is a float
            ts: datetime

            @pipeline
            @inputs(Pay2)
            def decay(cls, pay):  # type: ignore[no-untyped-def]
                return pay.groupby("uid").aggregate(
                    total=ExpDecaySum(of="amount", window=Continuous("forever"), half_life="1w")
                )


def test_exp_decay_sum_encodes_its_half_life_and_leaves_other_aggregates_unchanged() -> None:
    pay, decayed = _decayed("continuous", "forever", "1w")
    ds = next(d for d in commit_spec("e", [pay, decayed]).datasets if d.name == "Decayed")
    node = ds.pipelines[0].nodes[-1]
    assert isinstance(node, spec.AggregateNode)
    assert node.aggs[0].kind == "exp_decay" and node.aggs[0].half_life == 7 * 86400
    assert ds.terminal  # read at lookup time: nothing can follow it
    assert decode(encode(node)) == node
    plain = spec.AggSpec(kind="sum", into="t", window=spec.WindowSpec("forever"), of="a")
    assert "half_life" not in to_jsonable(plain)


def test_exp_decay_sum_commits_on_the_platform_and_a_commit_checks_its_window_too() -> None:
    pay, decayed = _decayed("continuous", "7d", "1d")
    commit = commit_spec("e", [pay, decayed])
    assert validate(commit, None, PLATFORM_RULES) == []
    ds = next(d for d in commit.datasets if d.name == "Decayed")
    p = ds.pipelines[0]
    node = p.nodes[-1]
    assert isinstance(node, spec.AggregateNode)
    tumbling = spec.WindowSpec("tumbling", 3600, 3600)
    bad_node = replace(node, aggs=(replace(node.aggs[0], window=tumbling),))
    bad = replace(ds, pipelines=(replace(p, nodes=(*p.nodes[:-1], bad_node)),))
    others = tuple(d for d in commit.datasets if d.name != "Decayed")
    errors = validate(replace(commit, datasets=(*others, bad)), None)
    assert any("ExpDecaySum 'score' uses a tumbling window" in e.message for e in errors), errors


@pytest.mark.services
def test_exp_decay_sum_gives_the_same_rows_on_spark_as_on_the_engine(spark: Any) -> None:
    from fennel_dagster.batch.pipeline import SparkPipeline, spark_schema

    pay, decayed = _decayed("continuous", "6h", "90m", float | None)
    minutes = [0, 7, 7, 50, 300, 301, 30, 400, 400, 1000, 12, 999]
    amounts = [1.5, None, 2.0, -4.0, 8.0, 0.25, 3.0, 1e9, 1.0, 2.0, 5.0, None]
    rows = [{"uid": i % 3, "amount": a, "ts": T0 + timedelta(minutes=m)}
            for i, (m, a) in enumerate(zip(minutes, amounts, strict=True))]  # fmt: skip
    client = MockClient()
    client.commit("parity", datasets=[pay, decayed])
    client.log("decl_hook", "Pay", pd.DataFrame(rows))
    cols = ["uid", "score", "ts"]
    want = client.get_dataset_df("Decayed")[cols].to_dict("records")

    commit = commit_spec("parity", [pay, decayed])
    by_name = {d.name: d for d in commit.datasets}
    frame = spark.createDataFrame(rows, spark_schema(by_name["Pay"].fields))
    got = SparkPipeline(by_name["Decayed"].pipelines[0], by_name).run({"Pay": frame})
    got_rows = [r.asDict() for r in got.select(*cols).collect()]

    def norm(recs: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted((r["uid"], r["score"], pd.Timestamp(r["ts"]).tz_localize(None)
                       if pd.Timestamp(r["ts"]).tzinfo else pd.Timestamp(r["ts"]))
                      for r in recs)  # fmt: skip

    assert len(want) == len(rows)
    assert norm(got_rows) == norm(want)  # the same floats, bit for bit


def test_a_field_marked_deleted_is_refused_naming_it_not_silently_kept() -> None:
    # Fennel's words as the message; which field, and the fix, in the hint
    with pytest.raises(DeclarationError) as e:

        @dataset(index=True)
        class Users:
            uid: int = field(key=True)
            age: int = field().meta(deleted=True)  # type: ignore[attr-defined]
            ts: datetime

    assert str(e.value) == "Dataset currently does not support deleted or deprecated fields."
    assert "Users.age" in str(e.value.hint) and "remove the field" in str(e.value.hint)
